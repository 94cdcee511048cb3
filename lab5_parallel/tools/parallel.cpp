// mls-parallel: trains the toy residual MLP stack with data, tensor, pipeline or 3-D parallelism
// on simulated ranks (or one rank per process under mpirun), printing the loss per step, the
// traffic table (per rank: messages and bytes, by collective) and wall vs modelled time.
//
//   mls-parallel --mode dp --ranks 4
//   mls-parallel --mode 3d --ranks 8 --dims 2,2,2 --check
//   mls-parallel --mode pp --ranks 4 --micro 8 --schedule gpipe --svg pipeline.svg
//   mls-parallel --mode schedule -p 4 -m 8 --svg schedules.svg   (no training: GPipe and 1F1B)
//   mls-parallel --mode schedule -p 4 -m 8 --schedule 1f1b --svg 1f1b.svg   (one of them)
//   mpirun -np 2 mls-parallel --mode dp --backend mpi
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/common/timer.hpp"
#include "mls/common/file.hpp"
#include "mls/parallel/mesh.hpp"
#include "mls/parallel/pipeline.hpp"
#include "mls/parallel/tensor_parallel.hpp"
#ifdef MLS_HAVE_MPI
#include "mls/parallel/mpi.hpp"
#endif

using namespace mls;
using namespace mls::parallel;

namespace {

struct Dims {
  int dp = 1, tp = 1, pp = 1;
};

Dims dims_for(const std::string& mode, int n, const std::string& spec) {
  if (mode == "dp") return {n, 1, 1};
  if (mode == "tp") return {1, n, 1};
  if (mode == "pp") return {1, 1, n};
  Dims d;
  if (!spec.empty()) {
    char c1 = 0, c2 = 0;
    std::istringstream is(spec);
    is >> d.dp >> c1 >> d.tp >> c2 >> d.pp;
    MLS_CHECK(is && c1 == ',' && c2 == ',' && is.peek() == std::char_traits<char>::eof(), "mls-parallel: --dims '", spec,
              "' is not dp,tp,pp (three counts, e.g. 2,2,2)");
    MLS_CHECK(d.dp >= 1 && d.tp >= 1 && d.pp >= 1, "mls-parallel: --dims ", spec, ": every count must be >= 1");
    MLS_CHECK(d.dp * d.tp * d.pp == n, "mls-parallel: --dims ", spec, " makes ", d.dp * d.tp * d.pp, " ranks, but ",
              "there are ", n, " (--ranks, or the process count under mpirun)");
  } else {  // the most cubic factorisation, tensor parallel first
    d = {1, 1, 1};
    int rest = n;
    int* order[3] = {&d.tp, &d.pp, &d.dp};
    for (int k = 0; rest > 1; k = (k + 1) % 3) {
      int f = 2;
      while (rest % f) ++f;
      *order[k] *= f;
      rest /= f;
    }
  }
  return d;
}

/// The flags that set each knob of the stack in `mode`, for validate_stack_3d's messages.
/// Under mpirun the ranks are the processes (`mpi`), not --ranks.
StackNames flag_names(const std::string& mode, int ranks, const Dims& d, const std::string& dims_spec, bool mpi) {
  StackNames n{.op = "mls-parallel", .dp = "dp", .tp = "tp", .pp = "pp", .d_model = "--d-model",
               .d_hidden = "--d-hidden", .batch = "--batch", .micro = "--micro", .steps = "--steps",
               .bucket_bytes = "--bucket-bytes", .lr = "--lr"};
  const std::string all = mpi ? "mpirun -np" : "--ranks";
  if (mode == "dp") n.dp = all;
  if (mode == "tp") n.tp = all;
  if (mode == "pp") n.pp = all;
  if (mode == "3d") {
    const std::string dims = std::to_string(d.dp) + "," + std::to_string(d.tp) + "," + std::to_string(d.pp);
    const std::string from = dims_spec.empty() ? "--dims " + dims + " (the default for " + all + " " + std::to_string(ranks) + ")"
                                               : "--dims " + dims_spec;
    n.dp = from + ": dp";
    n.tp = from + ": tp";
    n.pp = from + ": pp";
  }
  return n;
}

std::string human_bytes(std::int64_t b) {
  std::ostringstream os;
  if (b >= (1 << 20)) os << std::fixed << std::setprecision(2) << b / 1048576.0 << " MiB";
  else if (b >= 1024) os << std::fixed << std::setprecision(1) << b / 1024.0 << " KiB";
  else os << b << " B";
  return os.str();
}

void print_traffic(const std::vector<Traffic>& traffic) {
  std::printf("\ntraffic (per rank, sent; by collective)\n");
  std::printf("%-5s %-16s %10s %12s %10s %12s\n", "rank", "collective", "messages", "bytes", "recv msgs", "recv bytes");
  for (std::size_t r = 0; r < traffic.size(); ++r) {
    for (const auto& [op, c] : traffic[r].by_op)
      std::printf("%-5zu %-16s %10lld %12s %10lld %12s\n", r, op.c_str(), static_cast<long long>(c.messages_sent),
                  human_bytes(c.bytes_sent).c_str(), static_cast<long long>(c.messages_recv),
                  human_bytes(c.bytes_recv).c_str());
    const auto& t = traffic[r].total;
    std::printf("%-5zu %-16s %10lld %12s %10lld %12s\n", r, "TOTAL", static_cast<long long>(t.messages_sent),
                human_bytes(t.bytes_sent).c_str(), static_cast<long long>(t.messages_recv),
                human_bytes(t.bytes_recv).c_str());
  }
}

double max_param_diff(const StackResult& got, const StackResult& ref, int rank, const Dims& d) {
  const MeshCoord m = Mesh3D::coord_of(rank, d.tp, d.pp);
  double diff = 0.0;
  for (std::size_t k = 0; k < 4; ++k) {
    const std::int64_t dim = ParallelMLP::kShardDims[k];
    const Tensor& full = ref.params[static_cast<std::size_t>(m.s)][k];
    const auto w = (dim < 0 ? full : shard(full, dim, m.t, d.tp)).to_vector<double>();
    const auto g = got.params[0][k].to_vector<double>();
    for (std::size_t i = 0; i < g.size(); ++i) diff = std::max(diff, std::abs(g[i] - w[i]));
  }
  return diff;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-parallel: data, tensor, pipeline and 3-D parallel training of a toy MLP stack"};
  std::string mode = "dp", backend = "sim", schedule = "1f1b", dims_spec, svg, dtype = "float64";
  int ranks = 4, p = 4, m = 8;
  StackConfig c;
  bool check = false, quiet_traffic = false;
  app.add_option("--mode", mode, "dp | tp | pp | 3d | schedule (schedule: draws GPipe and 1F1B, no training)")
      ->check(CLI::IsMember({"dp", "tp", "pp", "3d", "schedule"}));
  app.add_option("--backend", backend, "sim | mpi | nccl")->check(CLI::IsMember({"sim", "mpi", "nccl"}));
  app.add_option("--ranks", ranks, "simulated ranks (sim); under mpirun the process count")->check(CLI::Range(1, 4096));
  app.add_option("--dims", dims_spec, "3d: dp,tp,pp (default: a factorisation of --ranks)");
  app.add_option("--steps", c.steps, "SGD steps");
  app.add_option("--batch", c.batch, "global batch (rows)");
  app.add_option("--d-model", c.d_model, "model width D");
  app.add_option("--d-hidden", c.d_hidden, "MLP hidden width H (divisible by tp)");
  app.add_option("--micro", c.micro_batches, "pipeline micro-batches per data-parallel replica");
  app.add_option("--schedule", schedule, "gpipe | 1f1b (schedule mode: draw only this one; default both)")
      ->check(CLI::IsMember({"gpipe", "1f1b"}));
  app.add_option("--bucket-bytes", c.bucket_bytes, "data-parallel gradient bucket size");
  app.add_option("--lr", c.lr, "SGD learning rate");
  app.add_option("--dtype", dtype, "float32 | float64")->check(CLI::IsMember({"float32", "float64"}));
  app.add_option("--svg", svg, "pp/3d/schedule: write the pipeline timeline as SVG to this file");
  app.add_option("-p", p, "schedule mode: stages")->check(CLI::Range(1, 64));
  app.add_option("-m", m, "schedule mode: micro-batches")->check(CLI::Range(1, 256));
  app.add_flag("--overlap", c.overlap,
               "dp/3d: start each gradient bucket's allreduce (asynchronously) inside the backward of the step's "
               "last micro-batch, from hooks on the parameters; waited before the SGD step");
  app.add_flag("--check", check, "compare the parameters with a single-rank run");
  app.add_flag("--no-traffic", quiet_traffic, "do not print the traffic table");
  CLI11_PARSE(app, argc, argv);

  try {
    c.schedule = schedule_kind_from_string(schedule);
    c.dtype = dtype == "float32" ? DType::Float32 : DType::Float64;
    // A flag of another mode would be ignored: say so instead.
    MLS_CHECK(mode == "3d" || app.count("--dims") == 0, "mls-parallel: --dims is for --mode 3d (--mode ", mode,
              " puts all --ranks on one axis)");
    for (const char* f : {"-p", "-m"})
      MLS_CHECK(mode == "schedule" || app.count(f) == 0, "mls-parallel: ", f, " is for --mode schedule; --mode ", mode,
                " takes --ranks (stages in pp) and --micro");
    MLS_CHECK(!c.overlap || mode == "dp" || mode == "3d", "mls-parallel: --overlap is for --mode dp or 3d (it ",
              "overlaps the data-parallel gradient allreduces); --mode ", mode, " has no data-parallel axis");
    for (const char* f : {"--ranks", "--micro"})
      MLS_CHECK(mode != "schedule" || app.count(f) == 0, "mls-parallel: --mode schedule takes -p (stages) and -m ",
                "(micro-batches), not ", f);
    if (mode == "schedule") {
      // Both schedules, GPipe then 1F1B, unless --schedule names one: the same bubble, different memory.
      std::vector<ScheduleKind> kinds = {ScheduleKind::GPipe, ScheduleKind::OneFOneB};
      if (app.count("--schedule")) kinds = {c.schedule};
      std::vector<Timeline> ts;
      std::vector<std::string> titles;
      for (ScheduleKind k : kinds) {
        ts.push_back(simulate_schedule(make_schedule(p, m, k)));
        titles.push_back(to_string(k));
        std::cout << (ts.size() > 1 ? "\n" : "") << to_string(k) << ", p = " << p << ", m = " << m << "\n"
                  << schedule_text(ts.back());
      }
      if (!svg.empty()) {
        mls::write_file_atomic(svg, schedule_comparison_svg(ts, titles), "mls-parallel --svg");
        std::cout << "wrote " << svg << (ts.size() > 1 ? " (gpipe above 1f1b, one time scale)" : "") << "\n";
      }
      return 0;
    }
    MLS_CHECK(backend != "nccl", "mls-parallel: the training wrappers run on CPU tensors; the nccl backend moves ",
              "GPU buffers (see mls-collectives), use --backend sim or mpi");
#ifdef MLS_HAVE_MPI
    if (backend == "mpi" || under_mpirun()) {
      backend = "mpi";
      mpi_init();
    }
#else
    MLS_CHECK(backend != "mpi", "mls-parallel: built without MPI (apt-get install libopenmpi-dev, reconfigure)");
#endif
    std::mutex mu;
    std::vector<StackResult> results;
    std::vector<PipelineStats> pstats;
    Dims d;
    auto body = [&](Communicator& world) {
      PipelineStats st;
      StackResult r = train_stack_3d(world, c, d.dp, d.tp, d.pp, &st);
      std::lock_guard<std::mutex> lock(mu);
      results[static_cast<std::size_t>(world.rank())] = std::move(r);
      pstats[static_cast<std::size_t>(world.rank())] = st;
    };
    Timer wall;
    int me = 0;
    if (backend == "sim") {
      d = dims_for(mode, ranks, dims_spec);
      c.blocks = d.pp;
      validate_stack_3d(c, d.dp, d.tp, d.pp, flag_names(mode, ranks, d, dims_spec, false));  // before any rank starts
      results.resize(static_cast<std::size_t>(ranks));
      pstats.resize(static_cast<std::size_t>(ranks));
      run_simulated(ranks, body);
    } else {
#ifdef MLS_HAVE_MPI
      Communicator world = mpi_world();
      ranks = world.size();
      me = world.rank();
      d = dims_for(mode, ranks, dims_spec);
      c.blocks = d.pp;
      validate_stack_3d(c, d.dp, d.tp, d.pp, flag_names(mode, ranks, d, dims_spec, true));  // the same on every rank
      results.resize(static_cast<std::size_t>(ranks));
      pstats.resize(static_cast<std::size_t>(ranks));
      body(world);
      // Rank 0 prints; the other ranks' traffic comes as totals (messages and bytes, both ways).
      const auto& mine = results[static_cast<std::size_t>(me)].traffic.total;
      const Tensor tot = Tensor::from({static_cast<double>(mine.messages_sent), static_cast<double>(mine.bytes_sent),
                                       static_cast<double>(mine.messages_recv), static_cast<double>(mine.bytes_recv)})
                             .to(DType::Float64);
      const Tensor all = world.allgather(tot);
      for (int r = 0; r < ranks; ++r) {
        if (r == me) continue;
        auto& t = results[static_cast<std::size_t>(r)].traffic.total;
        t.messages_sent = static_cast<std::int64_t>(all.at({r, 0}));
        t.bytes_sent = static_cast<std::int64_t>(all.at({r, 1}));
        t.messages_recv = static_cast<std::int64_t>(all.at({r, 2}));
        t.bytes_recv = static_cast<std::int64_t>(all.at({r, 3}));
        results[static_cast<std::size_t>(r)].losses = results[static_cast<std::size_t>(me)].losses;
      }
#endif
    }
    const double wall_s = wall.seconds();
    if (me != 0) return 0;
    std::printf("mls-parallel: mode %s, backend %s, %d ranks = dp %d x tp %d x pp %d, %s, batch %lld, micro %d%s\n",
                mode.c_str(), backend.c_str(), ranks, d.dp, d.tp, d.pp, to_string(c.schedule),
                static_cast<long long>(c.batch), c.micro_batches, c.overlap ? ", overlap" : "");
    const auto& r0 = results[0];
    for (std::size_t s = 0; s < r0.losses.size(); ++s) std::printf("step %zu loss %.8f\n", s + 1, r0.losses[s]);
    if (!quiet_traffic) {
      std::vector<Traffic> tr;
      for (const auto& r : results) tr.push_back(r.traffic);
      print_traffic(tr);
    }
    if (c.overlap)
      std::printf("overlap: %lld gradient bucket(s) launched from inside backward on rank 0 (all steps)\n",
                  static_cast<long long>(r0.overlapped_buckets));
    double modelled = 0.0;
    for (const auto& r : results) modelled = std::max(modelled, r.modelled_seconds);
    std::printf("\nwall %.6f s, modelled communication (alpha-beta-gamma) %.6f s%s\n", wall_s, modelled,
                backend == "sim" ? "" : " (no model on this backend)");
    if (d.pp > 1) {
      const PipelineStats& st = pstats[0];
      std::printf("pipeline (last step, stage 0): %s, bubble %.4f (closed form %.4f), peak live micro-batches %d\n",
                  to_string(c.schedule), st.bubble, bubble_fraction(d.pp, c.micro_batches), st.peak_live_micro);
      if (!svg.empty()) {
        const Timeline t = simulate_schedule(make_schedule(d.pp, c.micro_batches, c.schedule));
        mls::write_file_atomic(svg, schedule_svg(t, to_string(c.schedule)), "mls-parallel --svg");
        std::printf("wrote %s\n", svg.c_str());
      }
    }
    if (check) {
      const StackResult ref = train_stack_single(c);
      double diff = 0.0;
      if (backend == "sim")
        for (int r = 0; r < ranks; ++r) diff = std::max(diff, max_param_diff(results[static_cast<std::size_t>(r)], ref, r, d));
      else
        diff = max_param_diff(results[0], ref, 0, d);
      std::printf("check: max |parameter - single-rank parameter| = %.3g (%s)\n", diff,
                  diff <= (c.dtype == DType::Float64 ? 1e-10 : 1e-4) ? "ok" : "MISMATCH");
      if (diff > (c.dtype == DType::Float64 ? 1e-10 : 1e-4)) return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
