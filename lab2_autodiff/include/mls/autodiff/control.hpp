#pragma once
/// Control flow in graphs (lecture 000's RNNs, issue 29 section 3): `cond` and `while_loop` as
/// ops of lab 2's one registry.
///
/// Eager (all operands/state eager): they just run the host's control flow, and the tape records
/// the ops of the branch taken and of every iteration (the tape is the saved state).
/// Graph (operands/state are nodes of a Graph): each branch, the loop's condition and its body is
/// a *sub-graph*, a lab 2 `Graph` built once by calling the function on placeholders of the
/// operands'/state's shapes. A graph node the function uses from an enclosing graph (e.g. an
/// LSTM's weights) is *captured*: it becomes a placeholder of the sub-graph and an input of the
/// control node. The control node holds its sub-graphs (attribute "body", an id into a
/// process-wide table, so every executor and pass that runs an op's forward runs them too); the
/// Executor evaluates the body's sub-graph once per iteration.
///
///   std::vector<Var> out = while_loop(
///       [&](const std::vector<Var>& s) { return lt(s[0], T); },              // 0-d predicate
///       [&](const std::vector<Var>& s) { return std::vector<Var>{s[0] + one, step(s[1])}; },
///       {t0, h0});
///
/// Reverse mode: cond's gradient is a cond over the branches' backward sub-graphs; while_loop's
/// gradient replays the iterations in reverse (`while_backward_replay`, a lab 2 task) through the
/// body's backward sub-graph, reading the states the forward saved: a stack of T + 1 states, so
/// the memory cost is O(T x state bytes), and T iterations that must run one after the other (each
/// needs the previous state: unlike attention, an RNN over a sequence cannot run its steps in
/// parallel). Gradients into captured values accumulate over the iterations. Forward mode (jvp)
/// pushes the tangents through the chosen branch, or through the body once per iteration.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "mls/autodiff/graph.hpp"

namespace mls::autodiff {

/// A branch of `cond` or a loop body: maps the operands (or the state) to the outputs.
using BranchFn = std::function<std::vector<Var>(const std::vector<Var>&)>;
/// A loop's condition: maps the state to a 0-d predicate (bool, or a number: nonzero is true).
using LoopCondFn = std::function<Var(const std::vector<Var>&)>;

/// The default bound on a loop's iterations: more is an `mls::Error`, never a hang.
inline constexpr std::int64_t kDefaultMaxIterations = 1000000;

/// then_fn(operands) when `pred` (a 0-d bool or number) is true, else else_fn(operands). In a
/// graph both branches are built (as sub-graphs) and must give the same number of outputs with the
/// same shapes and dtypes; otherwise `mls::Error` naming cond, the output and both shapes. A
/// predicate that is not 0-d is an error naming its shape. Eagerly only the branch taken runs.
std::vector<Var> cond(const Var& pred, const BranchFn& then_fn, const BranchFn& else_fn,
                      const std::vector<Var>& operands);

/// Runs `state = body_fn(state)` while `cond_fn(state)` is true and returns the final state
/// (loop-carried: one Var per state Var, same shapes and dtypes). The body must return as many
/// Vars as the state with the same shapes and dtypes (checked when the sub-graph is built and at
/// every iteration): otherwise `mls::Error` naming while_loop, the state index and both shapes.
/// More than `max_iterations` iterations is an `mls::Error` naming the bound.
std::vector<Var> while_loop(const LoopCondFn& cond_fn, const BranchFn& body_fn,
                            const std::vector<Var>& state,
                            std::int64_t max_iterations = kDefaultMaxIterations);

/// A sub-graph of a control node: its own Graph, its placeholders (operands/state first, then one
/// per capture; undefined for a capture this sub-graph does not use) and its outputs.
struct SubGraph {
  std::shared_ptr<Graph> graph;
  std::vector<Var> inputs;
  std::vector<Var> outputs;
};

/// What a control node (op "cond" or "while_loop") holds; shared by the nodes of its outputs.
struct ControlFlow {
  std::int64_t id = 0;
  Op op = Op::Cond;
  std::size_t num_operands = 0;  // operands of cond / state of while_loop
  std::size_t num_captures = 0;  // captured values of enclosing graphs, inputs after the operands
  /// cond: {then, else}; while_loop: {condition, body}.
  std::vector<SubGraph> subs;
  std::int64_t max_iterations = kDefaultMaxIterations;
  /// True once a gradient of the loop was built: the forward then saves every iteration's state.
  bool saves_states = false;
};

/// The control flow a node holds (its "body" attribute); nullptr for any other node (or for a
/// cond/while_loop node whose sub-graphs are not in this process, e.g. one read from a file).
const ControlFlow* control_flow(const Node& node);
/// Publishes `cf` (a copy of a control node's ControlFlow, e.g. with sub-graphs a pass rewrote:
/// the same operands, captures and outputs) under a new id and returns it: set it as the "body"
/// attribute of every node that held the old id. It starts with no saved states, no trip count
/// and no backward sub-graphs built (`saves_states` false).
std::int64_t publish_control_flow(ControlFlow cf);

/// Number of iterations the last run of this loop node took (-1 before any run): T, the length
/// of its sequential chain.
std::int64_t last_trip_count(const Node& while_node);

/// The vector-Jacobian product of one loop iteration: the adjoints of the state before the
/// iteration (`d_state`, one per state tensor) and of the captured values (`d_captures`) given
/// the state before it and the adjoint of the state after it. Tensors are always defined (zeros
/// where no gradient flows).
struct BodyVjp {
  std::vector<Tensor> d_state;
  std::vector<Tensor> d_captures;
};
using BodyVjpFn = std::function<BodyVjp(const std::vector<Tensor>& state, const std::vector<Tensor>& adjoint)>;

/// What reverse mode gives for a loop: the adjoints of the initial state and of the captures.
struct WhileGrads {
  std::vector<Tensor> d_init;
  std::vector<Tensor> d_captures;
};

/// Lab 2 task (group "control"): the reverse replay of a while loop. `states` holds the T + 1
/// states the forward saved (states[0] the initial state, states[T] the final one), `adjoint` the
/// adjoint of the final state, `d_captures` the starting adjoints of the captures (zeros of their
/// shapes). Walk t = T-1, ..., 0: the adjoint of states[t] is `vjp(states[t], adjoint of
/// states[t+1]).d_state`, and each iteration's d_captures ADD UP (the same weights are used by
/// every iteration). Returns {adjoint of states[0], summed d_captures}. With T = 0 the adjoint
/// passes through unchanged. Hint: states[T] is never fed to vjp.
WhileGrads while_backward_replay(std::span<const std::vector<Tensor>> states, std::vector<Tensor> adjoint,
                                 std::vector<Tensor> d_captures, const BodyVjpFn& vjp);

}  // namespace mls::autodiff
