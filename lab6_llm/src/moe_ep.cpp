// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6: expert parallelism — one MoE MLP with its experts sharded over an EP group; dispatch and
// combine are all_to_allv exchanges of the routed tokens' rows (lab 5).
#include "mls/llm/moe_ep.hpp"

#include <algorithm>
#include <cstring>

#include "mls/common/error.hpp"
#include "mls/common/timer.hpp"

namespace mls::llm {

using parallel::Algo;
using parallel::Communicator;
using parallel::ReduceOp;

Tensor ep_exchange(Communicator& comm, const Tensor& send, std::int64_t row,
                   const std::vector<std::int64_t>& send_rows, std::vector<std::int64_t>& recv_rows) {
  const auto P = static_cast<std::size_t>(comm.size());
  MLS_CHECK(send_rows.size() == P && (recv_rows.empty() || recv_rows.size() == P), "ep_exchange: ",
            send_rows.size(), " send and ", recv_rows.size(), " receive counts, expected ", P,
            " (one per rank; no receive counts: learn them)");
  // BEGIN SOLUTION
  if (recv_rows.empty()) {  // learn what every rank sends here: an all_to_all of the counts
    const Tensor got = comm.all_to_all(Tensor::from_vector(send_rows, {static_cast<std::int64_t>(P), 1}));
    recv_rows.assign(got.data<std::int64_t>(), got.data<std::int64_t>() + P);
  }
  std::vector<std::int64_t> sc(P), rc(P);
  for (std::size_t s = 0; s < P; ++s) sc[s] = send_rows[s] * row, rc[s] = recv_rows[s] * row;
  return comm.all_to_allv(send, sc, rc);
  // END SOLUTION
}

namespace {
/// ep_exchange, its wall time added to `seconds`.
Tensor timed_exchange(double& seconds, Communicator& comm, const Tensor& send, std::int64_t row,
                      const std::vector<std::int64_t>& send_rows, std::vector<std::int64_t>& recv_rows) {
  Timer t;
  Tensor out = ep_exchange(comm, send, row, send_rows, recv_rows);
  seconds += t.seconds();
  return out;
}
}  // namespace

EpMoe::EpMoe(const GPTConfig& cfg, Communicator& comm, std::int64_t n_local) : cfg_(cfg), comm_(&comm) {
  cfg.validate();
  MLS_CHECK(is_moe(cfg), "EpMoe: a dense config (moe_experts = 0)");
  P_ = comm.size();
  r_ = comm.rank();
  MLS_CHECK(cfg.moe_experts % P_ == 0, "EpMoe: moe_experts = ", cfg.moe_experts,
            " is not divisible by the expert-parallel group's ", P_, " ranks");
  MLS_CHECK(n_local >= 1, "EpMoe: n_local = ", n_local, ", expected >= 1 tokens per rank");
  N_ = n_local, Ntot_ = n_local * P_, E_ = cfg.moe_experts, K_ = cfg.moe_top_k, C_ = cfg.n_embd;
  El_ = E_ / P_, e0_ = r_ * El_, cap_ = moe_capacity(cfg, Ntot_);
  x_.assign(static_cast<std::size_t>(N_ * C_), 0.f);
  probs_.assign(static_cast<std::size_t>(N_ * E_), 0.f);
  lse_.assign(static_cast<std::size_t>(N_), 0.f);
  gate_.assign(static_cast<std::size_t>(N_ * K_), 0.f);
  frac_.assign(static_cast<std::size_t>(E_), 0.f);
  expert_.assign(static_cast<std::size_t>(N_ * K_), 0);
  choice_row_.assign(static_cast<std::size_t>(N_ * K_), -1);
  xin_.assign(static_cast<std::size_t>(El_ * cap_ * C_), 0.f);
  h_.assign(static_cast<std::size_t>(El_ * cap_ * 4 * C_), 0.f);
  hg_.assign(h_.size(), 0.f);
  y_.assign(xin_.size(), 0.f);
  local_count.assign(static_cast<std::size_t>(El_), 0);
}

void EpMoe::forward(const ParamPtrs& p, const float* x, float* out) {
  Communicator& comm = *comm_;
  const std::int64_t N = N_, E = E_, K = K_, C = C_;
  const std::int64_t sent0 = comm.traffic().total.bytes_sent;
  exchange_seconds = 0;
  std::copy(x, x + N * C, x_.begin());
  // Route locally: the router (replicated) and the top-k of every token (no capacity yet).
  matmul_forward(probs_.data(), x, p.moe_router, nullptr, N, C, E);
  moe_router_softmax(probs_.data(), lse_.data(), N, E);
  {
    std::vector<std::int32_t> slot(static_cast<std::size_t>(N * K)), count(static_cast<std::size_t>(E)),
        token(static_cast<std::size_t>(E * N * K));
    moe_route(probs_.data(), N, E, K, N * K, expert_.data(), gate_.data(), slot.data(), count.data(), token.data());
  }
  // Capacity, decided as the single-rank MoE decides it over the group's tokens (rank 0's first):
  // every rank learns every rank's choices per (k, e).
  std::vector<std::int64_t> demand(static_cast<std::size_t>(K * E), 0);
  for (std::int64_t t = 0; t < N; ++t)
    for (std::int64_t k = 0; k < K; ++k) ++demand[static_cast<std::size_t>(k * E + expert_[t * K + k])];
  const Tensor all = comm.allgather(Tensor::from_vector(demand, {K * E}));  // [P, K·E]
  const std::int64_t* A = all.data<std::int64_t>();
  std::vector<std::int64_t> start(static_cast<std::size_t>(K * E), 0), total(static_cast<std::size_t>(E), 0);
  for (std::int64_t e = 0; e < E; ++e) {
    std::int64_t before = 0;  // choices of earlier k (every rank)
    for (std::int64_t k = 0; k < K; ++k) {
      std::int64_t s = before;
      for (std::int64_t q = 0; q < r_; ++q) s += A[q * K * E + k * E + e];
      start[static_cast<std::size_t>(k * E + e)] = s;
      for (std::int64_t q = 0; q < P_; ++q) before += A[q * K * E + k * E + e];
    }
    total[static_cast<std::size_t>(e)] = before;
  }
  // The group's losses: frac from the counts, the mean probabilities and z from allreduced sums.
  std::vector<double> sums(static_cast<std::size_t>(E + 1), 0.0);
  for (std::int64_t t = 0; t < N; ++t) {
    for (std::int64_t e = 0; e < E; ++e) sums[static_cast<std::size_t>(e)] += probs_[t * E + e];
    sums[static_cast<std::size_t>(E)] += static_cast<double>(lse_[t]) * lse_[t];
  }
  Tensor st = Tensor::from_vector(sums, {E + 1});
  comm.allreduce(st, ReduceOp::Sum);
  balance_loss = 0;
  dropped = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    const double f = static_cast<double>(total[e]) / static_cast<double>(Ntot_ * K);
    frac_[static_cast<std::size_t>(e)] = static_cast<float>(f);
    balance_loss += f * st.data<double>()[e] / static_cast<double>(Ntot_);
    dropped += std::max<std::int64_t>(0, total[e] - cap_);
  }
  balance_loss *= cfg_.moe_aux_coef * static_cast<double>(E);
  z_loss = cfg_.moe_z_coef * st.data<double>()[E] / static_cast<double>(Ntot_);
  for (std::int64_t e = 0; e < El_; ++e)
    local_count[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(std::min(cap_, total[e0_ + e]));
  // Claims in the single-rank order; the kept choices' rows go to their experts' owners.
  std::vector<std::vector<std::int64_t>> idx(static_cast<std::size_t>(P_)), slots(static_cast<std::size_t>(P_));
  std::vector<std::int64_t> seen(static_cast<std::size_t>(K * E), 0);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t t = 0; t < N; ++t) {
      const std::int64_t e = expert_[t * K + k];
      const std::int64_t pos = start[k * E + e] + seen[k * E + e]++;
      if (pos >= cap_) continue;
      const std::int64_t o = e / El_;
      idx[static_cast<std::size_t>(o)].push_back(t * K + k);
      slots[static_cast<std::size_t>(o)].push_back((e - o * El_) * cap_ + pos);
    }
  send_rows_.assign(static_cast<std::size_t>(P_), 0);
  send_index_.clear();
  std::vector<std::int64_t> send_slots;
  for (std::int64_t o = 0; o < P_; ++o) {
    send_rows_[static_cast<std::size_t>(o)] = static_cast<std::int64_t>(idx[static_cast<std::size_t>(o)].size());
    for (auto i : idx[static_cast<std::size_t>(o)]) send_index_.push_back(static_cast<std::int32_t>(i));
    send_slots.insert(send_slots.end(), slots[static_cast<std::size_t>(o)].begin(), slots[static_cast<std::size_t>(o)].end());
  }
  const auto S = static_cast<std::int64_t>(send_index_.size());
  std::fill(choice_row_.begin(), choice_row_.end(), -1);
  Tensor rows = Tensor::empty({S * C}, DType::Float32);
  for (std::int64_t i = 0; i < S; ++i) {
    choice_row_[static_cast<std::size_t>(send_index_[i])] = i;
    std::memcpy(rows.data<float>() + i * C, x + (send_index_[i] / K) * C, sizeof(float) * C);
  }
  // Dispatch: the rows and where each lands among its expert's rows.
  recv_rows_.clear();
  const Tensor rx = timed_exchange(exchange_seconds, comm, rows, C, send_rows_, recv_rows_);
  const Tensor rs = timed_exchange(exchange_seconds, comm, Tensor::from_vector(send_slots, {S}), 1, send_rows_, recv_rows_);
  recv_slot_.assign(rs.data<std::int64_t>(), rs.data<std::int64_t>() + rs.numel());
  std::fill(xin_.begin(), xin_.end(), 0.f);
  for (std::size_t i = 0; i < recv_slot_.size(); ++i)
    std::memcpy(xin_.data() + recv_slot_[i] * C, rx.data<float>() + static_cast<std::int64_t>(i) * C, sizeof(float) * C);
  // The local experts, then combine: the outputs go back the way their rows came.
  moe_experts_forward(p, El_, cap_, local_count.data(), xin_.data(), h_.data(), hg_.data(), y_.data(), C);
  Tensor back = Tensor::empty({static_cast<std::int64_t>(recv_slot_.size()) * C}, DType::Float32);
  for (std::size_t i = 0; i < recv_slot_.size(); ++i)
    std::memcpy(back.data<float>() + static_cast<std::int64_t>(i) * C, y_.data() + recv_slot_[i] * C, sizeof(float) * C);
  std::vector<std::int64_t> back_rows = send_rows_;
  const Tensor yb = timed_exchange(exchange_seconds, comm, back, C, recv_rows_, back_rows);
  yback_.assign(yb.data<float>(), yb.data<float>() + yb.numel());
  for (std::int64_t t = 0; t < N; ++t) {
    float* o = out + t * C;
    std::fill(o, o + C, 0.f);
    for (std::int64_t k = 0; k < K; ++k) {
      const std::int64_t i = choice_row_[t * K + k];
      if (i < 0) continue;
      const float g = gate_[t * K + k];
      for (std::int64_t c = 0; c < C; ++c) o[c] += g * yback_[i * C + c];
    }
  }
  bytes_sent = comm.traffic().total.bytes_sent - sent0;
}

void EpMoe::backward(const ParamPtrs& p, ParamPtrs& g, const float* dout, float* dx, float scale) {
  Communicator& comm = *comm_;
  const std::int64_t N = N_, E = E_, K = K_, C = C_;
  const std::int64_t sent0 = comm.traffic().total.bytes_sent;
  // Combine backward at the token's rank: dgate = dout · y, dy = gate · dout, in the sent order.
  std::vector<float> dgate(static_cast<std::size_t>(N * K), 0.f);
  const auto S = static_cast<std::int64_t>(send_index_.size());
  Tensor dys = Tensor::empty({S * C}, DType::Float32);
  for (std::int64_t i = 0; i < S; ++i) {
    const std::int64_t tk = send_index_[i], t = tk / K;
    const float gt = gate_[tk];
    float dot = 0.f;
    for (std::int64_t c = 0; c < C; ++c) {
      dot += dout[t * C + c] * yback_[i * C + c];
      dys.data<float>()[i * C + c] = gt * dout[t * C + c];
    }
    dgate[tk] = dot;
  }
  // To the experts' owners (dispatch's counts), the local experts' backward, and back.
  std::vector<std::int64_t> recv = recv_rows_;
  const Tensor dyr = timed_exchange(exchange_seconds, comm, dys, C, send_rows_, recv);
  std::vector<float> dy(y_.size(), 0.f), dxin(xin_.size()), dh(h_.size()), dhg(hg_.size());
  for (std::size_t i = 0; i < recv_slot_.size(); ++i)
    std::memcpy(dy.data() + recv_slot_[i] * C, dyr.data<float>() + static_cast<std::int64_t>(i) * C, sizeof(float) * C);
  moe_experts_backward(p, g, El_, cap_, local_count.data(), xin_.data(), h_.data(), hg_.data(), dy.data(),
                       dxin.data(), dh.data(), dhg.data(), C);
  Tensor dback = Tensor::empty({static_cast<std::int64_t>(recv_slot_.size()) * C}, DType::Float32);
  for (std::size_t i = 0; i < recv_slot_.size(); ++i)
    std::memcpy(dback.data<float>() + static_cast<std::int64_t>(i) * C, dxin.data() + recv_slot_[i] * C,
                sizeof(float) * C);
  std::vector<std::int64_t> back_rows = send_rows_;
  const Tensor dxb = timed_exchange(exchange_seconds, comm, dback, C, recv_rows_, back_rows);
  // dx: each token's kept choices in order, as the single-rank scatter adds them.
  for (std::int64_t t = 0; t < N; ++t) {
    float* d = dx + t * C;
    std::fill(d, d + C, 0.f);
    for (std::int64_t k = 0; k < K; ++k) {
      const std::int64_t i = choice_row_[t * K + k];
      if (i < 0) continue;
      for (std::int64_t c = 0; c < C; ++c) d[c] += dxb.data<float>()[i * C + c];
    }
  }
  // The router: the gates, the balancing loss (this rank's share of the group's mean), softmax and
  // z-loss, then its weight gradient summed over the group.
  std::vector<float> dp(static_cast<std::size_t>(N * E));
  moe_gates_backward(dp.data(), probs_.data(), expert_.data(), gate_.data(), dgate.data(), N, E, K);
  moe_balance_loss_backward(dp.data(), frac_.data(), N, E, cfg_.moe_aux_coef,
                            scale * static_cast<float>(N) / static_cast<float>(Ntot_));
  moe_router_softmax_backward(dp.data(), probs_.data(), lse_.data(), N, E,
                              static_cast<float>(2.0 * cfg_.moe_z_coef * scale / static_cast<double>(Ntot_)));
  Tensor gr = Tensor::zeros({E * C});
  matmul_backward(dx, gr.data<float>(), nullptr, dp.data(), x_.data(), p.moe_router, N, C, E);
  comm.allreduce(gr, ReduceOp::Sum);
  for (std::int64_t i = 0; i < E * C; ++i) g.moe_router[i] += gr.data<float>()[i];
  bytes_sent += comm.traffic().total.bytes_sent - sent0;
}

}  // namespace mls::llm
