// Student file of lab 2: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Control flow: the reverse replay of a while loop (control.hpp). The ops themselves (cond,
// while_loop, their sub-graphs and registry entries) are in control_flow.cpp.
#include "mls/autodiff/control.hpp"

namespace mls::autodiff {

/// The reverse replay (control.hpp): walk the saved states backwards through the body's VJP,
/// summing the captures' adjoints over the iterations.
WhileGrads while_backward_replay(std::span<const std::vector<Tensor>> states, std::vector<Tensor> adjoint,
                                 std::vector<Tensor> d_captures, const BodyVjpFn& vjp) {
  MLS_CHECK(!states.empty(), "while_backward_replay: no saved states (the forward saves T + 1 >= 1 of them)");
  MLS_CHECK(adjoint.size() == states.front().size(), "while_backward_replay: ", adjoint.size(),
            " adjoints for a state of ", states.front().size(), " tensors");
  // BEGIN SOLUTION
  // states[t] is the state before iteration t; states.back() is the final state (never fed).
  for (std::size_t t = states.size() - 1; t-- > 0;) {
    BodyVjp step = vjp(states[t], adjoint);
    MLS_CHECK(step.d_state.size() == adjoint.size() && step.d_captures.size() == d_captures.size(),
              "while_backward_replay: the body's VJP gave ", step.d_state.size(), " state and ",
              step.d_captures.size(), " capture adjoints, expected ", adjoint.size(), " and ", d_captures.size());
    adjoint = std::move(step.d_state);
    for (std::size_t c = 0; c < d_captures.size(); ++c) d_captures[c] = mls::add(d_captures[c], step.d_captures[c]);
  }
  return {std::move(adjoint), std::move(d_captures)};
  // END SOLUTION
}

}  // namespace mls::autodiff
