#pragma once
/// Forward-mode AD (lecture 002, "Forward mode autodiff"): carry a tangent v̇ = ∂v/∂x along with
/// every value v, one pass per input direction.
///   - `Dual` for scalars: a value and a tangent, with the chain rule in every operator;
///   - `jvp` for tensors: runs a graph and pushes tangents through each node (J·u).
#include <functional>
#include <vector>

#include "mls/autodiff/graph.hpp"

namespace mls::autodiff {

/// A dual number v + v̇ε with ε² = 0: `v` the value, `d` the tangent (derivative along the
/// chosen input direction). Seed the input you differentiate by with d = 1, the others d = 0.
struct Dual {
  double v = 0.0;
  double d = 0.0;
  Dual() = default;
  /// A constant (tangent 0) when `tangent` is omitted.
  Dual(double value, double tangent = 0.0) : v(value), d(tangent) {}  // NOLINT: implicit from double
};

/// Sum rule: (a + b)˙ = ȧ + ḃ.
Dual operator+(Dual a, Dual b);
/// Difference rule: (a - b)˙ = ȧ - ḃ.
Dual operator-(Dual a, Dual b);
/// Product rule: (ab)˙ = ȧb + aḃ.
Dual operator*(Dual a, Dual b);
/// Quotient rule: (a/b)˙ = (ȧ - (a/b)ḃ) / b.
Dual operator/(Dual a, Dual b);
/// Negation: (-a)˙ = -ȧ.
Dual operator-(Dual a);
/// sin(a)˙ = ȧ cos(a).
Dual sin(Dual a);
/// cos(a)˙ = -ȧ sin(a).
Dual cos(Dual a);
/// exp(a)˙ = ȧ exp(a).
Dual exp(Dual a);
/// log(a)˙ = ȧ / a; throws `mls::Error` for a <= 0.
Dual log(Dual a);
/// tanh(a)˙ = ȧ (1 - tanh² a).
Dual tanh(Dual a);
/// sqrt(a)˙ = ȧ / (2 sqrt(a)); throws `mls::Error` for a <= 0.
Dual sqrt(Dual a);
/// (a^p)˙ = ȧ p a^(p-1) for a constant p.
Dual pow(Dual a, double p);

/// The forward-mode tangent of one node: given the node, its input values and input tangents
/// (undefined = zero) and its output value, returns the output tangent (undefined = zero).
/// Ops registered with a `jvp` rule (later labs, and relu_backward) use it; lab 2's other built-in
/// ops are this function's switch. Throws `mls::Error` for an op without a forward-mode rule.
Tensor jvp_rule(const Node& node, const std::vector<Tensor>& in_values, const std::vector<Tensor>& in_tangents,
                const Tensor& out_value);

/// Values and tangents of a forward-mode run.
struct JvpResult {
  std::vector<Tensor> values;    // one per output
  std::vector<Tensor> tangents;  // J·u, one per output (zeros where an output ignores the inputs)
};

/// Runs `outputs` of a graph with `feeds` and pushes `tangents` (u, one tensor per listed
/// placeholder or variable, same shape) forward through every node: returns J·u.
JvpResult jvp(const std::vector<Var>& outputs, const Feeds& feeds, const Feeds& tangents);

/// Functional form: builds a graph with one placeholder per primal, calls `f`, and returns f's
/// values and J·u for tangents u (same shapes as the primals).
JvpResult jvp(const std::function<std::vector<Var>(const std::vector<Var>&)>& f, const std::vector<Tensor>& primals,
              const std::vector<Tensor>& tangents);

}  // namespace mls::autodiff
