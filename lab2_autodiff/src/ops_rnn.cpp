// LSTM and GRU cells (workload.hpp), built from lab 2's ops (matmul, slice, sigmoid, tanh): their
// gradients, gradients of gradients and JVPs are those ops' rules, and a graph dump shows the
// gates. Not a student file.
#include "mls/autodiff/workload.hpp"
#include "ops_internal.hpp"

namespace mls::autodiff {

namespace {
/// Checks one operand of a cell against its expected shape (-1 in either: not checked), naming the
/// cell, the operand and every shape involved.
void expect(const char* cell, const char* what, const Var& v, const Shape& want,
            const std::string& all) {
  MLS_CHECK(v.defined(), cell, ": ", what, " is undefined");
  const Shape& s = v.shape();
  bool ok = s.size() == want.size();
  for (std::size_t i = 0; ok && i < s.size(); ++i) ok = s[i] < 0 || want[i] < 0 || s[i] == want[i];
  MLS_CHECK(ok, cell, ": ", what, " must be ", shape_str(want), ", got ", shape_str(s), " (", all,
            ")");
}
std::string shapes(std::initializer_list<std::pair<const char*, const Var*>> vs) {
  std::string r;
  for (const auto& [name, v] : vs) {
    if (!r.empty()) r += ", ";
    r +=
        std::string(name) + " " + (v->defined() ? shape_str(v->shape()) : std::string("undefined"));
  }
  return r;
}
/// x W^T + b for x [B, I], W [G, I], b [G].
Var affine(const Var& x, const Var& w, const Var& b) { return matmul(x, transpose(w)) + b; }
/// Checks the shared operands of a cell with `gates` gates; returns the hidden size H.
std::int64_t check_cell(const char* cell, std::int64_t gates, const Var& x, const Var& h,
                        const Var& w_ih, const Var& w_hh, const Var& b_ih, const Var& b_hh,
                        const std::string& all) {
  expect(cell, "w_hh", w_hh, {-1, -1}, all);
  const std::int64_t hs = w_hh.shape()[1];
  MLS_CHECK(hs > 0, cell, ": the hidden size (w_hh's columns) must be known and > 0 (", all, ")");
  expect(cell, "x", x, {-1, -1}, all);
  const std::int64_t b = x.shape()[0], in = x.shape()[1];
  expect(cell, "w_hh", w_hh, {gates * hs, hs}, all);
  expect(cell, "w_ih", w_ih, {gates * hs, in}, all);
  expect(cell, "b_ih", b_ih, {gates * hs}, all);
  expect(cell, "b_hh", b_hh, {gates * hs}, all);
  expect(cell, "h", h, {b, hs}, all);
  return hs;
}
}  // namespace

LstmState lstm_cell(const Var& x, const LstmState& state, const Var& w_ih, const Var& w_hh,
                    const Var& b_ih, const Var& b_hh) {
  const std::string all = shapes({{"x", &x},
                                  {"h", &state.h},
                                  {"c", &state.c},
                                  {"w_ih", &w_ih},
                                  {"w_hh", &w_hh},
                                  {"b_ih", &b_ih},
                                  {"b_hh", &b_hh}});
  const std::int64_t hs = check_cell("lstm_cell", 4, x, state.h, w_ih, w_hh, b_ih, b_hh, all);
  expect("lstm_cell", "c", state.c, state.h.shape(), all);
  const Var gates = affine(x, w_ih, b_ih) + affine(state.h, w_hh, b_hh);  // [B, 4H]: i, f, g, o
  const Var i = sigmoid(slice(gates, 1, 0, hs)).set_name("i");
  const Var f = sigmoid(slice(gates, 1, hs, 2 * hs)).set_name("f");
  const Var g = tanh(slice(gates, 1, 2 * hs, 3 * hs)).set_name("g");
  const Var o = sigmoid(slice(gates, 1, 3 * hs, 4 * hs)).set_name("o");
  Var c = (f * state.c + i * g).set_name("c");
  Var h = (o * tanh(c)).set_name("h");
  return {h, c};
}

Var gru_cell(const Var& x, const Var& h, const Var& w_ih, const Var& w_hh, const Var& b_ih,
             const Var& b_hh) {
  const std::string all = shapes(
      {{"x", &x}, {"h", &h}, {"w_ih", &w_ih}, {"w_hh", &w_hh}, {"b_ih", &b_ih}, {"b_hh", &b_hh}});
  const std::int64_t hs = check_cell("gru_cell", 3, x, h, w_ih, w_hh, b_ih, b_hh, all);
  const Var gi = affine(x, w_ih, b_ih), gh = affine(h, w_hh, b_hh);  // [B, 3H] each: r, z, n
  const Var r = sigmoid(slice(gi, 1, 0, hs) + slice(gh, 1, 0, hs)).set_name("r");
  const Var z = sigmoid(slice(gi, 1, hs, 2 * hs) + slice(gh, 1, hs, 2 * hs)).set_name("z");
  const Var n = tanh(slice(gi, 1, 2 * hs, 3 * hs) + r * slice(gh, 1, 2 * hs, 3 * hs)).set_name("n");
  return ((1.0 - z) * n + z * h).set_name("h");
}

}  // namespace mls::autodiff
