// Student file of lab 5: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 5 student code: the collective algorithms, over point-to-point messages only.
//
// Every function runs on every rank of the communicator at once. The primitives (given, in
// communicator.cpp) are:
//   coll_send(part, dst)                   one message (a step)
//   coll_recv(part, src)                   one message into a preallocated slice (a step)
//   coll_sendrecv(out, dst, in, src)       send and receive at the same time (one step)
//   reduce_into(acc, in, op)               acc = op(acc, in) elementwise
// They count the traffic, check the header every message carries and feed the trace, so
// the tests can compare your traffic with the theory exactly: send exactly the messages the
// algorithm prescribes (including empty ones when a chunk is empty), no more.
//
// Buffers are contiguous 1-D tensors; `buf.slice(0, a, b)` is the contiguous slice [a, b)
// that shares storage with `buf` (write into it to write into buf). Rank r = rank(),
// N = size(). chunk_bounds(n, N) gives the layout of the ring algorithms: chunk c is
// [bounds[c], bounds[c+1]) and holds n/N + (c < n%N) elements.
#include <bit>

#include "mls/common/error.hpp"
#include "mls/parallel/comm.hpp"

namespace mls::parallel {

namespace {
[[maybe_unused]] int mod(int a, int n) { return ((a % n) + n) % n; }
}  // namespace

/// Broadcast by the root sending the whole buffer to every other rank in turn (N−1 messages
/// from the root, N−1 steps). `buf` holds the data on `root`; every rank's `buf` ends equal to it.
/// Hint: the root loops over the other ranks; everyone else receives once from the root.
void Communicator::broadcast_linear(Tensor& buf, int root) {
  // BEGIN SOLUTION
  if (rank() == root) {
    for (int r = 0; r < size(); ++r)
      if (r != root) coll_send(buf, r);
  } else {
    coll_recv(buf, root);
  }
  // END SOLUTION
}

/// Binomial-tree broadcast: ⌈log2 N⌉ rounds. Number ranks relative to the root, v = (r − root) mod N.
/// In round k (k = 0, 1, ...) every rank with v < 2^k that already has the data sends it to
/// v + 2^k (when that is < N). So rank v (v > 0) receives once, from v − 2^⌊log2 v⌋, in round
/// ⌊log2 v⌋, then sends in every later round. Shapes: `buf` is [n], the same n on every rank.
/// Hint: a loop over mask = 1, 2, 4, ... < N: receive when mask is v's highest bit, send to
/// v + mask when v < mask.
void Communicator::broadcast_tree(Tensor& buf, int root) {
  // BEGIN SOLUTION
  const int n = size(), v = mod(rank() - root, n);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v >= mask && v < 2 * mask) {
      coll_recv(buf, mod(v - mask + root, n));
    } else if (v < mask && v + mask < n) {
      coll_send(buf, mod(v + mask + root, n));
    }
  }
  // END SOLUTION
}

/// Binomial-tree reduce into `root`: ⌈log2 N⌉ rounds, the mirror image of broadcast_tree.
/// With v = (r − root) mod N, for mask = 1, 2, 4, ...: a rank whose v has bit `mask` set sends
/// its partial result to v − mask and stops; otherwise, if v + mask < N, it receives v + mask's
/// partial result and reduces it into its own (reduce_into). Afterwards root's `buf` holds the
/// reduction of every rank's `buf` (Avg reduces as Sum; the caller divides). Other ranks' `buf`
/// is left partially reduced. Hint: receive into a scratch tensor of buf's size.
void Communicator::reduce_tree(Tensor& buf, ReduceOp op, int root) {
  // BEGIN SOLUTION
  const int n = size(), v = mod(rank() - root, n);
  Tensor scratch = Tensor::empty(buf.shape(), buf.dtype());
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      coll_send(buf, mod(v - mask + root, n));
      break;
    }
    if (v + mask < n) {
      coll_recv(scratch, mod(v + mask + root, n));
      reduce_into(buf, scratch, op);
    }
  }
  // END SOLUTION
}

/// Ring reduce-scatter. N−1 steps; in step s (0-based) rank r sends chunk (r − s − 1) mod N to
/// rank r+1 and receives chunk (r − s − 2) mod N from rank r−1, reducing it into its own copy of
/// that chunk. After N−1 steps rank r's chunk r is the reduction of every rank's chunk r.
/// Each rank sends every chunk but one: (N−1)/N of the buffer. `bounds` has N+1 offsets.
/// Hint: receive into a scratch tensor as large as the largest chunk (slice it to size).
void Communicator::reduce_scatter_ring(Tensor& buf, const std::vector<std::int64_t>& bounds, ReduceOp op) {
  // BEGIN SOLUTION
  const int n = size(), r = rank();
  if (n == 1) return;
  std::int64_t most = 0;
  for (int c = 0; c < n; ++c) most = std::max(most, bounds[c + 1] - bounds[c]);
  Tensor scratch = Tensor::empty({most}, buf.dtype());
  for (int s = 0; s < n - 1; ++s) {
    const int out = mod(r - s - 1, n), in = mod(r - s - 2, n);
    Tensor send_part = buf.slice(0, bounds[out], bounds[out + 1]);
    Tensor recv_part = scratch.slice(0, 0, bounds[in + 1] - bounds[in]);
    coll_sendrecv(send_part, mod(r + 1, n), recv_part, mod(r - 1, n));
    Tensor mine = buf.slice(0, bounds[in], bounds[in + 1]);
    reduce_into(mine, recv_part, op);
  }
  // END SOLUTION
}

/// Ring allgather. Rank r starts with its chunk r; N−1 steps; in step s rank r sends chunk
/// (r − s) mod N to rank r+1 and receives chunk (r − s − 1) mod N from rank r−1, straight into
/// place. Afterwards every rank has every chunk. Hint: no scratch buffer is needed.
void Communicator::allgather_ring(Tensor& buf, const std::vector<std::int64_t>& bounds) {
  // BEGIN SOLUTION
  const int n = size(), r = rank();
  for (int s = 0; s < n - 1; ++s) {
    const int out = mod(r - s, n), in = mod(r - s - 1, n);
    Tensor send_part = buf.slice(0, bounds[out], bounds[out + 1]);
    Tensor recv_part = buf.slice(0, bounds[in], bounds[in + 1]);
    coll_sendrecv(send_part, mod(r + 1, n), recv_part, mod(r - 1, n));
  }
  // END SOLUTION
}

/// Ring allreduce = ring reduce-scatter then ring allgather over chunk_bounds(n, N):
/// 2(N−1) steps, each rank sending 2(N−1)/N·n elements — the bandwidth-optimal allreduce.
/// Every rank's `buf` ends equal to the reduction of every rank's `buf` (bit-identical on
/// every rank: each chunk is reduced once, on one rank, then copied around).
/// Hint: two calls.
void Communicator::allreduce_ring(Tensor& buf, ReduceOp op) {
  // BEGIN SOLUTION
  const auto bounds = chunk_bounds(buf.numel(), size());
  reduce_scatter_ring(buf, bounds, op);
  allgather_ring(buf, bounds);
  // END SOLUTION
}

namespace {
/// Largest power of two <= n (n >= 1).
[[maybe_unused]] int floor_pow2(int n) { return static_cast<int>(std::bit_floor(static_cast<unsigned>(n))); }

/// The fold before recursive doubling / Rabenseifner when N is not a power of two. With
/// p = floor_pow2(N) and rem = N − p: each even rank r < 2·rem sends its whole `buf` to r+1 and
/// sits out (returns −1); each odd rank r < 2·rem receives it into `scratch`, reduces it into
/// `buf` and becomes virtual rank r/2; a rank r >= 2·rem becomes virtual rank r − rem.
/// Returns the virtual rank in [0, p), or −1. Hint: one coll_send or coll_recv at most.
[[maybe_unused]] int fold_in(Communicator& c, Tensor& buf, Tensor& scratch, ReduceOp op) {
  // BEGIN SOLUTION
  const int r = c.rank(), rem = c.size() - floor_pow2(c.size());
  if (r >= 2 * rem) return r - rem;
  if (r % 2 == 0) {
    c.coll_send(buf, r + 1);
    return -1;
  }
  c.coll_recv(scratch, r - 1);
  c.reduce_into(buf, scratch, op);
  return r / 2;
  // END SOLUTION
}

/// The unfold after it: each odd rank r < 2·rem sends the result in `buf` back to r−1, which
/// receives it into `buf`. Other ranks do nothing.
[[maybe_unused]] void fold_out(Communicator& c, Tensor& buf) {
  // BEGIN SOLUTION
  const int r = c.rank(), rem = c.size() - floor_pow2(c.size());
  if (r >= 2 * rem) return;
  if (r % 2 == 1) c.coll_send(buf, r - 1);
  else c.coll_recv(buf, r + 1);
  // END SOLUTION
}
}  // namespace

/// Recursive-doubling allreduce: log2 p steps of whole-buffer exchanges (latency-optimal).
/// With p the largest power of two <= N and rem = N − p: first the 2·rem lowest ranks pair up,
/// each even rank r < 2·rem sends its buffer to r+1 (which reduces it in) and sits out. The p
/// remaining ranks get virtual ranks (odd r < 2·rem: r/2; r >= 2·rem: r − rem); for
/// mask = 1, 2, ... < p each exchanges its whole buffer with virtual partner v ^ mask and
/// reduces the partner's into its own. Finally each odd r < 2·rem sends the result to r−1
/// (fold_in before, fold_out after: write those two first).
/// Hint: reduce in a fixed order, op(mine, theirs): the results agree bit for bit because
/// sum/max/min/prod of two values commute exactly.
void Communicator::allreduce_recursive_doubling(Tensor& buf, ReduceOp op) {
  // BEGIN SOLUTION
  const int p = floor_pow2(size()), rem = size() - p;
  Tensor scratch = Tensor::empty(buf.shape(), buf.dtype());
  const int v = fold_in(*this, buf, scratch, op);
  if (v >= 0) {
    for (int mask = 1; mask < p; mask <<= 1) {
      const int pv = v ^ mask, partner = pv < rem ? 2 * pv + 1 : pv + rem;
      coll_sendrecv(buf, partner, scratch, partner);
      reduce_into(buf, scratch, op);
    }
  }
  fold_out(*this, buf);
  // END SOLUTION
}

/// Rabenseifner's allreduce: reduce-scatter by recursive halving, then allgather by recursive
/// doubling, over the p = 2^⌊log2 N⌋ virtual ranks of allreduce_recursive_doubling (same fold
/// before and after). Chunks: chunk_bounds(n, p). Halving: for mask = p/2, p/4, ..., 1 a rank
/// holding chunks [lo, lo + 2·mask) exchanges with virtual partner v ^ mask: the one with the
/// bit clear keeps the lower half [lo, lo + mask), the other the upper half; each sends the half
/// it gives away and reduces the half it keeps. Then virtual rank v holds chunk v reduced.
/// Doubling mirrors it (mask = 1, 2, ..., p/2), sending what it has, receiving the partner's half.
/// Cost: 2·log2 p messages, 2(p−1)/p·n elements sent. Hint: track [lo, hi) in chunk units.
void Communicator::allreduce_rabenseifner(Tensor& buf, ReduceOp op) {
  // BEGIN SOLUTION
  const int p = floor_pow2(size()), rem = size() - p;
  Tensor scratch = Tensor::empty(buf.shape(), buf.dtype());
  const int v = fold_in(*this, buf, scratch, op);
  if (v >= 0 && p > 1) {
    const auto b = chunk_bounds(buf.numel(), p);
    auto real = [&](int pv) { return pv < rem ? 2 * pv + 1 : pv + rem; };
    auto part = [&](Tensor& t, int c0, int c1) { return t.slice(0, b[c0] - b[0], b[c1] - b[0]); };
    int lo = 0, count = p;  // the chunks [lo, lo + count) this rank is responsible for
    for (int mask = p / 2; mask >= 1; mask >>= 1) {
      const int partner = real(v ^ mask), half = count / 2;
      const bool lower = (v & mask) == 0;
      const int keep = lower ? lo : lo + half, give = lower ? lo + half : lo;
      Tensor out = part(buf, give, give + half);
      Tensor in = part(scratch, keep, keep + half);
      coll_sendrecv(out, partner, in, partner);
      Tensor mine = part(buf, keep, keep + half);
      reduce_into(mine, in, op);
      lo = keep;
      count = half;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
      const int partner = real(v ^ mask);
      const bool lower = (v & mask) == 0;
      const int other = lower ? lo + count : lo - count;
      Tensor out = part(buf, lo, lo + count);
      Tensor in = part(buf, other, other + count);
      coll_sendrecv(out, partner, in, partner);
      lo = std::min(lo, other);
      count *= 2;
    }
  }
  fold_out(*this, buf);
  // END SOLUTION
}

/// Linear gather: every rank but the root sends `mine` (chunk r's size) to the root, which
/// copies its own chunk and receives chunk s from rank s, in rank order, into `out`.
/// Hint: on the root, out.slice(0, bounds[s], bounds[s+1]) is where rank s's data goes.
void Communicator::gather_linear(const Tensor& mine, Tensor& out, const std::vector<std::int64_t>& bounds, int root) {
  // BEGIN SOLUTION
  if (rank() != root) {
    coll_send(mine, root);
    return;
  }
  for (int s = 0; s < size(); ++s) {
    Tensor dst = out.slice(0, bounds[s], bounds[s + 1]);
    if (s == root) dst.copy_(mine);
    else coll_recv(dst, s);
  }
  // END SOLUTION
}

/// Linear scatter: the root sends chunk s of `all` to rank s (in rank order) and copies its own
/// chunk into `mine`; every other rank receives its chunk from the root into `mine`.
void Communicator::scatter_linear(const Tensor& all, Tensor& mine, const std::vector<std::int64_t>& bounds, int root) {
  // BEGIN SOLUTION
  if (rank() != root) {
    coll_recv(mine, root);
    return;
  }
  for (int s = 0; s < size(); ++s) {
    Tensor src = all.slice(0, bounds[s], bounds[s + 1]);
    if (s == root) mine.copy_(src);
    else coll_send(src, s);
  }
  // END SOLUTION
}

/// Pairwise-exchange all-to-all: N−1 steps; in step s (1..N−1) rank r sends its chunk
/// (r + s) mod N to rank r + s and receives chunk (r − s) mod N of `out` from rank r − s.
/// Its own chunk r is copied locally. Every rank sends (N−1)/N of its buffer.
void Communicator::all_to_all_pairwise(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& bounds) {
  // BEGIN SOLUTION
  const int n = size(), r = rank();
  out.slice(0, bounds[r], bounds[r + 1]).copy_(in.slice(0, bounds[r], bounds[r + 1]));
  for (int s = 1; s < n; ++s) {
    const int dst = mod(r + s, n), src = mod(r - s, n);
    Tensor send_part = in.slice(0, bounds[dst], bounds[dst + 1]);
    Tensor recv_part = out.slice(0, bounds[src], bounds[src + 1]);
    coll_sendrecv(send_part, dst, recv_part, src);
  }
  // END SOLUTION
}

/// Pairwise exchange of uneven chunks (all_to_allv): as all_to_all_pairwise, N−1 steps, in step s
/// rank r sends its chunk r + s and receives chunk r − s (mod N); the chunks of `in` are
/// [send_bounds[d], send_bounds[d+1]) and those of `out` [recv_bounds[s], recv_bounds[s+1]),
/// which may be empty (a message of 0 bytes still goes: the receiver checks its size).
void Communicator::all_to_allv_pairwise(const Tensor& in, const std::vector<std::int64_t>& send_bounds, Tensor& out,
                                        const std::vector<std::int64_t>& recv_bounds) {
  // BEGIN SOLUTION
  const int n = size(), r = rank();
  out.slice(0, recv_bounds[r], recv_bounds[r + 1]).copy_(in.slice(0, send_bounds[r], send_bounds[r + 1]));
  for (int s = 1; s < n; ++s) {
    const int dst = mod(r + s, n), src = mod(r - s, n);
    Tensor send_part = in.slice(0, send_bounds[dst], send_bounds[dst + 1]);
    Tensor recv_part = out.slice(0, recv_bounds[src], recv_bounds[src + 1]);
    coll_sendrecv(send_part, dst, recv_part, src);
  }
  // END SOLUTION
}

/// Dissemination barrier: ⌈log2 N⌉ rounds; in round k rank r sends an empty message to
/// r + 2^k and receives one from r − 2^k (mod N). No rank leaves before every rank entered.
/// Hint: empty tensors, Tensor::empty({0}, DType::Int32), make empty messages.
void Communicator::barrier_dissemination() {
  // BEGIN SOLUTION
  const int n = size(), r = rank();
  Tensor out = Tensor::empty({0}, DType::Int32), in = Tensor::empty({0}, DType::Int32);
  for (int k = 1; k < n; k <<= 1) coll_sendrecv(out, mod(r + k, n), in, mod(r - k, n));
  // END SOLUTION
}

}  // namespace mls::parallel
