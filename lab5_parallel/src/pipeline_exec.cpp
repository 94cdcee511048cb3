// The pipeline executor: one stage per rank, a schedule from make_schedule, activations forward
// and gradients backward over send/recv, a logical clock carried in a header before each message.
#include <algorithm>

#include "mls/common/error.hpp"
#include "mls/parallel/pipeline.hpp"

namespace mls::parallel {

namespace {
constexpr std::int64_t kHeader = 10;  // [clock, ndim, dims (up to 8)]

/// Tags of the messages of micro-batch i: forward header/data, backward header/data.
int tag_of(int micro, int which) { return 4 * micro + which; }

std::int64_t bytes_of(const Tensor& t) { return t.defined() ? t.numel() * static_cast<std::int64_t>(t.itemsize()) : 0; }

struct Outbox {
  std::vector<Request> requests;
  std::vector<Tensor> keep;  // buffers that must live until their isend completed
  void send(Communicator& comm, const Tensor& t, double clock, int dst, int micro, int which) {
    MLS_CHECK(t.ndim() <= kHeader - 2, "pipeline_step: activations of ", t.ndim(), " dims (at most ",
              kHeader - 2, ")");
    Tensor h = Tensor::zeros({kHeader}, DType::Float64);
    auto* hp = h.data<double>();
    hp[0] = clock;
    hp[1] = static_cast<double>(t.ndim());
    for (std::int64_t d = 0; d < t.ndim(); ++d) hp[2 + d] = static_cast<double>(t.size(d));
    Tensor body = t.compact();
    requests.push_back(comm.isend(h, dst, tag_of(micro, which)));
    requests.push_back(comm.isend(body, dst, tag_of(micro, which + 1)));
    keep.push_back(h);
    keep.push_back(body);
  }
  void wait_all() {
    for (auto& r : requests) r.wait();
    requests.clear();
    keep.clear();
  }
};

/// Receives a header and its tensor; advances `clock` to the sender's.
Tensor receive(Communicator& comm, DType dtype, double& clock, int src, int micro, int which) {
  Tensor h = Tensor::zeros({kHeader}, DType::Float64);
  comm.recv(h, src, tag_of(micro, which));
  const auto* hp = h.data<double>();
  clock = std::max(clock, hp[0]);
  Shape shape(static_cast<std::size_t>(hp[1]));
  for (std::size_t d = 0; d < shape.size(); ++d) shape[d] = static_cast<std::int64_t>(hp[2 + d]);
  Tensor t = Tensor::empty(shape, dtype);
  comm.recv(t, src, tag_of(micro, which + 1));
  return t;
}
}  // namespace

PipelineStats pipeline_step(Communicator& comm, autodiff::nn::Module& stage, const Tensor& x, const Tensor& y,
                            const PipelineOptions& opts) {
  const int p = comm.size(), s = comm.rank(), m = opts.micro_batches;
  MLS_CHECK(m >= 1, "pipeline_step: micro_batches = ", m, " must be >= 1");
  const bool first = s == 0, last = s == p - 1;
  std::int64_t mb = 0;
  if (first) {
    MLS_CHECK(x.defined() && x.ndim() >= 1, "pipeline_step: stage 0 needs the input batch x");
    MLS_CHECK(x.size(0) % m == 0, "pipeline_step: batch of ", x.size(0), " rows does not split into ", m,
              " equal micro-batches");
    mb = x.size(0) / m;
  }
  if (last) {
    MLS_CHECK(y.defined() && y.ndim() >= 1, "pipeline_step: the last stage needs the targets y");
    MLS_CHECK(y.size(0) % m == 0, "pipeline_step: targets of ", y.size(0), " rows do not split into ", m,
              " equal micro-batches");
  }
  const PipeLossFn loss_fn = opts.loss ? opts.loss : PipeLossFn([](const autodiff::Var& o, const autodiff::Var& t) {
    return autodiff::mse_loss(o, t);
  });
  const std::vector<PipeStep> steps = make_schedule(p, m, opts.kind)[static_cast<std::size_t>(s)];
  int last_backward = -1;  // the micro-batch whose backward this stage runs last (opts.last_forward)
  for (const PipeStep& step : steps)
    if (step.kind == PipeStep::Backward) last_backward = step.micro;

  struct Stash {
    autodiff::Var in, out, loss;
    std::int64_t bytes = 0;
  };
  std::vector<Stash> stash(static_cast<std::size_t>(m));
  PipelineStats st;
  double clock = 0.0, loss_sum = 0.0;
  std::int64_t live = 0;
  int live_micro = 0;
  Outbox out;
  for (const PipeStep& step : steps) {
    Stash& sh = stash[static_cast<std::size_t>(step.micro)];
    if (step.kind == PipeStep::Forward) {
      Tensor in_t;
      if (first) {
        in_t = x.slice(0, step.micro * mb, (step.micro + 1) * mb).to(opts.dtype).compact();
      } else {
        in_t = receive(comm, opts.dtype, clock, s - 1, step.micro, 0);
      }
      const double start = clock;
      sh.in = autodiff::Var(in_t, /*requires_grad=*/!first);
      sh.out = opts.last_forward && step.micro == last_backward ? opts.last_forward(sh.in) : stage.forward(sh.in);
      clock += opts.t_fwd;
      st.slots.push_back({s, step, start, clock});
      if (last) {
        const std::int64_t ymb = y.size(0) / m;
        const autodiff::Var target(y.slice(0, step.micro * ymb, (step.micro + 1) * ymb).compact());
        sh.loss = loss_fn(sh.out, target) / static_cast<double>(m);
        loss_sum += sh.loss.value().item();
      } else {
        out.send(comm, sh.out.value(), clock, s + 1, step.micro, 0);
      }
      sh.bytes = bytes_of(sh.in.value()) + bytes_of(sh.out.value());
      st.micro_bytes = std::max(st.micro_bytes, sh.bytes);
      live += sh.bytes;
      ++live_micro;
      st.peak_live_bytes = std::max(st.peak_live_bytes, live);
      st.peak_live_micro = std::max(st.peak_live_micro, live_micro);
    } else {
      MLS_CHECK(sh.out.defined(), "pipeline_step: stage ", s, " runs B", step.micro, " before F", step.micro);
      if (last) {
        MLS_CHECK(sh.loss.requires_grad(), "pipeline_step: the loss of stage ", s,
                  " does not depend on any parameter");
        sh.loss.backward();
      } else {
        const Tensor g = receive(comm, opts.dtype, clock, s + 1, step.micro, 2);
        if (sh.out.requires_grad()) sh.out.backward(g);
      }
      const double start = clock;
      clock += opts.t_bwd;
      st.slots.push_back({s, step, start, clock});
      if (!first) {
        const autodiff::Var gin = sh.in.grad();
        const Tensor g = gin.defined() ? gin.value() : Tensor::zeros(sh.in.shape(), opts.dtype);
        out.send(comm, g, clock, s - 1, step.micro, 2);
      }
      live -= sh.bytes;
      --live_micro;
      sh = Stash{};  // release the activations of this micro-batch
    }
  }
  out.wait_all();
  // The makespan is the latest clock; the loss lives on the last stage.
  Tensor tot = Tensor::scalar(clock, DType::Float64);
  comm.allreduce(tot, ReduceOp::Max);
  st.total_time = tot.item();
  Tensor ls = Tensor::scalar(loss_sum, DType::Float64);
  comm.broadcast(ls, p - 1);
  st.loss = ls.item();
  st.busy_time = static_cast<double>(m) * (opts.t_fwd + opts.t_bwd);
  st.bubble = (st.total_time - st.busy_time) / st.total_time;
  return st;
}

}  // namespace mls::parallel
