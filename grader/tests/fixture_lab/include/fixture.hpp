#pragma once
/// The grader fixture lab: three tiny functions a "student" writes.
namespace fixture {
/// Returns a + b.
int add(int a, int b);
/// Returns a * b.
int mul(int a, int b);
/// Returns 1 + 2 + ... + n (0 for n <= 0).
long sum_to(int n);
}  // namespace fixture
