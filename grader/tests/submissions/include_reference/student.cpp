// Includes the reference solution by its absolute path in the instructor's checkout (@REPO@ is
// replaced by the suite): the compiler, run for the submission, must not be able to read it.
// Without isolation this scores 10/10; isolated, it does not build: 0.
#include "@REPO@/grader/tests/fixture_lab/src/student.cpp"
