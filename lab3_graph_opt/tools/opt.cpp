// mls-opt: builds (or loads) a model, runs a pass pipeline, prints a statistics table (nodes,
// FLOPs, bytes moved, peak memory, measured time before/after) and writes DOT files.
//
//   mls-opt                                   # the three example models, default pipeline
//   mls-opt --model attention --passes merge-matmuls,fold-transpose,epilogue --dump-after epilogue
//   mls-opt --load g.json --save g_opt.json
//   mls-opt --discover [--max-ops 3] [--show-rules 20]   # TASO-style rule discovery and search
//   mls-opt parallel --model inception --threads 2 --svg trace.svg   # operator-parallel schedule
//   mls-opt parallel --model heads --bench --planned --events        # every node: lane, times, budget
//   mls-opt compile --model mlp|attention|slides [--svg-dir D]   # compile(fn) on an eager model
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "mls/common/file.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/timer.hpp"
#include "mls/graph_opt/compile.hpp"
#include "mls/graph_opt/discover.hpp"
#include "mls/graph_opt/memory.hpp"
#include "mls/graph_opt/models.hpp"
#include "mls/graph_opt/parallel.hpp"
#include "mls/graph_opt/passes.hpp"

using namespace mls;
using namespace mls::graph_opt;

namespace {
struct Snapshot {
  std::size_t nodes = 0;
  ProgramCost cost;
  std::size_t planned = 0, naive = 0, measured = 0;
  double ms = 0;
};

Snapshot measure(const Program& p, int repeats) {
  Snapshot s;
  s.nodes = p.size();
  s.cost = program_cost(p);
  const MemoryPlan plan = plan_memory(p);
  s.planned = plan.peak_bytes;
  s.naive = plan.naive_bytes;
  const auto feeds = random_feeds(p, 1);
  PlannedExecutor ex(p, plan);
  (void)ex.run(feeds);
  s.measured = ex.measured_peak_bytes();
  (void)run(p, feeds);  // warm up
  s.ms = 1e3 * time_min([&] { (void)run(p, feeds); }, repeats);
  return s;
}

void row(const char* what, double before, double after, const char* unit) {
  std::printf("  %-22s %14.4g %14.4g %8.3f  %s\n", what, before, after, before > 0 ? after / before : 0.0, unit);
}

int optimise(Program p, const std::string& name, const std::string& passes, const std::vector<std::string>& dump_after,
             const std::string& out, const std::string& save, int repeats, bool show) {
  const Program ref = clone(p);
  std::filesystem::create_directories(out);
  to_dot(p, name + " (before)").write(out + "/" + name + ".before.dot");
  const Snapshot b = measure(p, repeats);
  PassManager pm;
  pm.add_pipeline(passes);
  for (const std::string& d : dump_after) {
    (void)find_pass(d);
    pm.dump_after(d, out + "/" + name + ".after-" + d + ".dot");
  }
  const PassReport r = pm.run(p);
  to_dot(p, name + " (after)").write(out + "/" + name + ".after.dot");
  const Snapshot a = measure(p, repeats);
  const auto feeds = random_feeds(ref, 2);
  const double err = max_rel_error(run(p, feeds), run(ref, feeds));
  std::printf("== %s ==\n%s", name.c_str(), r.table().c_str());
  std::printf("  %-22s %14s %14s %8s\n", "", "before", "after", "ratio");
  row("nodes", static_cast<double>(b.nodes), static_cast<double>(a.nodes), "");
  row("FLOPs", b.cost.flops, a.cost.flops, "");
  row("bytes moved", b.cost.bytes, a.cost.bytes, "B");
  row("peak (naive)", static_cast<double>(b.naive), static_cast<double>(a.naive), "B");
  row("peak (planned)", static_cast<double>(b.planned), static_cast<double>(a.planned), "B");
  row("peak (executor)", static_cast<double>(b.measured), static_cast<double>(a.measured), "B");
  row("time", b.ms, a.ms, "ms (min of runs)");
  std::printf("  outputs agree: max error / tolerance = %.3g %s\n", err, err <= 1 ? "(ok)" : "(MISMATCH)");
  std::printf("  DOT: %s/%s.before.dot, %s/%s.after.dot\n\n", out.c_str(), name.c_str(), out.c_str(), name.c_str());
  if (show) std::cout << print(p) << "\n";
  if (!save.empty()) save_json(p, save);
  return err <= 1 ? 0 : 1;
}

/// One search example: prints the program before and after, the costs and the rules applied.
void search_example(const char* title, const Program& p, const std::vector<DiscoveredRule>& rules) {
  const SearchResult s = search_rewrites(p, rules);
  const ProgramCost b = program_cost(p), a = program_cost(s.best);
  std::printf("\n-- search: %s --\nbefore:\n%s", title, print(p).c_str());
  std::printf("after (%d programs expanded):\n%s", s.expanded, print(s.best).c_str());
  std::printf("  cost (FLOPs + bytes + 64/node): %.0f -> %.0f (%.3f)   nodes %zu -> %zu, FLOPs %.0f -> %.0f, bytes %.0f -> %.0f\n",
              s.cost_before, s.cost_after, s.cost_after / s.cost_before, b.nodes, a.nodes, b.flops, a.flops, b.bytes,
              a.bytes);
  for (const std::string& step : s.steps) std::printf("  applied: %s\n", step.c_str());
  std::printf("  outputs agree: %s\n", equivalent(p, s.best) ? "yes" : "NO");
}

int discover(int max_ops, int show_rules) {
  Discovery d;
  const double secs = time_min([&] { d = discover_rules({.max_ops = max_ops}); }, 1);
  const DiscoveryStats& s = d.stats;
  std::printf("== rule discovery (TASO-style): ops neg, transpose, relu, add, sub, mul, matmul; A, B, C (square); 0, 1 ==\n");
  std::printf("  expressions enumerated (<= %d ops)  %zu\n", max_ops, s.enumerated);
  std::printf("  fingerprint classes                %zu\n", s.classes);
  std::printf("  candidate pairs                    %zu\n", s.candidates);
  std::printf("  verified rules                     %zu\n", s.verified);
  std::printf("  rules after pruning                %zu\n", s.kept);
  std::printf("  time                               %.2f s\n", secs);
  for (int i = 0; i < show_rules && i < static_cast<int>(d.rules.size()); ++i)
    std::printf("    %s\n", d.rules[static_cast<std::size_t>(i)].str().c_str());
  std::printf("\nhand-written rewrites rediscovered:\n");
  int found = 0;
  const auto known = rediscovered(d.rules);
  for (const KnownRewrite& k : known) {
    found += k.found;
    std::printf("  [%s] %-52s %s\n", k.found ? "x" : " ", k.pass.c_str(), k.rule.c_str());
  }
  std::printf("  %d of %zu\n", found, known.size());
  {
    Program p;
    const Var a = p.input("A", {64, 64}, DType::Float64), b = p.input("B", {64, 64}, DType::Float64);
    p.output(autodiff::permute(autodiff::matmul(autodiff::permute(a, {1, 0}), autodiff::permute(b, {1, 0})), {1, 0}));
    search_example("transpose(transpose(A) @ transpose(B))", p, d.rules);
  }
  {
    Program p;
    const Var a = p.input("A", {64, 64}, DType::Float64), b = p.input("B", {64, 64}, DType::Float64);
    const Var c = p.input("C", {64, 64}, DType::Float64);
    p.output(a * b + a * c);
    search_example("A*B + A*C", p, d.rules);
  }
  return 0;
}
/// `mls-opt parallel`: the levels, one traced run of the parallel executor (checked bit for bit
/// against the sequential one), its summary and SVG, and both executors' times.
int parallel(Program p, const std::string& name, const std::string& passes, int threads, int workers, const std::string& svg_path,
             int repeats, ParallelOptions options, bool events) {
  MLS_CHECK(threads >= 1, "mls-opt parallel: --threads is ", threads, ", expected a count >= 1");
  ThreadCountGuard guard(threads);
  if (!passes.empty() && passes != "none") PassManager().add_pipeline(passes).run(p);
  if (workers == 0) workers = threads;
  ParallelExecutor ex(p, workers, options);
  const auto feeds = random_feeds(p, 1);
  const std::vector<Tensor> want = run(p, feeds);
  (void)ex.run(feeds);  // warm up (with --search: 3 runs, whose node times the search uses)
  if (options.search_trials > 0) {
    (void)ex.run(feeds);
    (void)ex.run(feeds);
    std::printf("schedule search (%d trials on the warm-up runs' node times): simulated makespan %.1f us with bottom levels, %.1f us searched\n",
                ex.schedule_search().trials, ex.schedule_search().base_makespan * 1e6, ex.schedule_search().best_makespan * 1e6);
  }
  const std::vector<Tensor> got = ex.run(feeds);
  bool same = got.size() == want.size();
  for (std::size_t i = 0; same && i < got.size(); ++i) {
    const Tensor a = got[i].compact(), b = want[i].compact();
    same = a.shape() == b.shape() && std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<std::size_t>(a.numel()) * itemsize(a.dtype())) == 0;
  }
  std::printf("== %s: operator-parallel schedule (passes: %s) ==\n%s", name.c_str(), passes.empty() ? "none" : passes.c_str(),
              levels_text(p).c_str());
  // The trace shown: the fastest of the repeats (each a whole real run; on a busy machine a single
  // run is often one whose threads were descheduled).
  ScheduleTrace best = ex.trace();
  for (int r = 1; r < repeats; ++r) {
    (void)ex.run(feeds);
    if (ex.trace().wall_us < best.wall_us) best = ex.trace();
  }
  std::printf("trace: the fastest of %d runs\n%s", std::max(1, repeats), trace_summary(p, best).c_str());
  if (events) std::printf("%s", trace_events_text(p, best).c_str());
  try {  // the memory plans, for comparison: the sequential one is not valid when nodes run at once
    const MemoryPlan plan = plan_memory(p), conc = options.planned ? ex.plan() : plan_memory_concurrent(p);
    const std::string race = concurrent_plan_violation(p, plan);
    std::printf("sequential memory plan: %zu bytes in buffers, %zu live at most; under concurrency: %s\n"
                "concurrent memory plan: %zu bytes in buffers (%s)\n", plan.peak_bytes, plan.live_bytes_max,
                race.empty() ? "valid" : ("NOT valid, " + race).c_str(), conc.peak_bytes,
                options.planned ? "the run above lives in it" : "the run above allocates each value: --planned uses it");
  } catch (const Error& e) {
    std::printf("memory plans: none (%s)\n", e.what());
  }
  const double seq = 1e3 * time_min([&] { (void)run(p, feeds); }, repeats);
  const double par = 1e3 * time_min([&] { (void)ex.run(feeds); }, repeats);
  std::printf("time (min of %d): sequential %.3f ms, parallel %.3f ms, ratio %.3f (%d threads, %d workers)\n", repeats, seq, par,
              seq > 0 ? par / seq : 0.0, threads, workers);
  if (workers > 1) {  // the nodes that ran on one thread each: their times together vs alone
    const std::size_t n = ex.tasks().size();
    std::vector<double> together(n, 1e300), alone(n, 1e300);
    std::vector<int> budget(n, 0);
    auto keep_min = [](const ScheduleTrace& t, std::vector<double>& best) {
      for (std::size_t i = 0; i < t.events.size(); ++i) best[i] = std::min(best[i], t.events[i].end_us - t.events[i].start_us);
    };
    ParallelExecutor one(p, 1, options);
    for (int r = 0; r < std::max(1, repeats); ++r) {
      (void)ex.run(feeds);
      keep_min(ex.trace(), together);
      for (std::size_t i = 0; i < n; ++i) budget[i] = std::max(budget[i], ex.trace().events[i].intra_threads);
      IntraOpBudget single(1);
      (void)one.run(feeds);
      keep_min(one.trace(), alone);
    }
    double sum_together = 0, sum_alone = 0;
    int count = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (budget[i] == 1) sum_together += together[i], sum_alone += alone[i], ++count;
    std::printf("nodes on one thread each (%d): %.1f us together, %.1f us alone (one worker, one thread; min of %d "
                "each): %.2fx when they run at once\n", count, sum_together, sum_alone, repeats,
                sum_alone > 0 ? sum_together / sum_alone : 0.0);
  }
  std::printf("outputs bit-identical to the sequential executor: %s\n", same ? "yes" : "NO");
  if (!svg_path.empty()) {
    write_file_atomic(svg_path, trace_svg(p, best));  // the fastest traced run's schedule
    std::printf("SVG: %s\n", svg_path.c_str());
  }
  return same ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Optimise a lab 3 program: run a pass pipeline and compare before/after."};
  std::string model = "all", load, save, out = "mls-opt-out", passes = default_pipeline();
  std::vector<std::string> dump_after;
  int repeats = 5;
  bool show = false, list = false, disc = false;
  int max_ops = 3, show_rules = 0;
  app.add_option("-m,--model", model, "resnet, attention, mlp or all")->capture_default_str();
  app.add_option("-l,--load", load, "load a graph file (JSON, from --save) instead of building a model");
  app.add_option("-p,--passes", passes, "comma-separated pass pipeline")->capture_default_str();
  app.add_option("--dump-after", dump_after, "write the DOT drawing after this pass (repeatable)");
  app.add_option("-o,--out", out, "folder for DOT files")->capture_default_str();
  app.add_option("-s,--save", save, "write the optimised graph as JSON");
  app.add_option("-r,--repeats", repeats, "timing repeats")->capture_default_str();
  app.add_flag("--print", show, "print the optimised graph");
  app.add_flag("--list-passes", list, "list the passes and exit");
  app.add_flag("--discover", disc, "discover rewrite rules (TASO-style), report them and run the search examples");
  app.add_option("--max-ops", max_ops, "with --discover: expressions of up to this many ops")->capture_default_str();
  app.add_option("--show-rules", show_rules, "with --discover: print this many of the rules")->capture_default_str();
  auto* par = app.add_subcommand("parallel", "run a model's ready nodes concurrently: levels, trace summary, SVG");
  std::string par_model = "inception", par_passes = "none", svg;
  int threads = 2, workers = 0;
  par->add_option("-m,--model", par_model, "resnet, attention, mlp, inception or heads")->capture_default_str();
  par->add_option("-l,--load", load, "load a graph file (JSON) instead of building a model");
  par->add_option("-p,--passes", par_passes, "a pass pipeline to run first (none: the model as built)")->capture_default_str();
  par->add_option("-t,--threads", threads, "threads (mls::num_threads)")->capture_default_str();
  par->add_option("-w,--workers", workers, "workers running nodes at once (0: as many as threads)")->capture_default_str();
  par->add_option("--svg", svg, "write the schedule as an SVG picture (one lane per worker)");
  par->add_option("-r,--repeats", repeats, "timing repeats")->capture_default_str();
  int par_search = 0;
  par->add_option("--search", par_search, "search node priorities on a simulator with the first 3 runs' node times, this many trials (0: bottom levels)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  bool par_planned = false, par_fifo = false, par_bench = false, par_no_affinity = false, par_events = false, par_no_slices = false;
  par->add_flag("--planned", par_planned, "run in the buffers of the concurrent memory plan (plan_memory_concurrent)");
  par->add_flag("--bench", par_bench, "the benchmark's shapes (inception 4x32x16x16, heads 128 x 256 with 8 heads; mls_lab3_bench_graphopt)");
  par->add_flag("--no-affinity", par_no_affinity, "among ready nodes of equal rank, no preference for the worker that computed their inputs or ran them last");
  par->add_flag("--no-concat-in-place", par_no_slices, "concats copy their inputs (default: inputs read by a concat alone are computed in their slices of its value)");
  par->add_flag("--events", par_events, "print every node of the traced run: worker, start, end, wait and budget");
  par->add_flag("--fifo", par_fifo, "take ready nodes first in, first out (default: longest path to the end first)");
  std::string compile_model = "mlp", svg_dir;
  CLI::App* compile_cmd = app.add_subcommand("compile", "compile(fn) on an eager model: captured graph, guards, passes, memory, drawings");
  compile_cmd->add_option("-m,--model", compile_model, "mlp, attention or slides")->capture_default_str();
  compile_cmd->add_option("--svg-dir", svg_dir, "write DOT and SVG drawings (traced, compiled forward and backward) here");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*compile_cmd) {
      std::cout << compile_report(compile_model, svg_dir);
      return 0;
    }
    if (par->parsed()) {
      MLS_CHECK(!(par_bench && !load.empty()), "mls-opt parallel: --bench takes the benchmark's model '", par_model,
                "', --load a graph file '", load, "': give one of them");
      if (!load.empty()) return parallel(load_json_file(load), std::filesystem::path(load).stem().string(), par_passes, threads, workers, svg, repeats,
                                        {.longest_path_first = !par_fifo, .affinity = !par_no_affinity, .planned = par_planned, .concat_in_place = !par_no_slices, .search_trials = par_search}, par_events);
      return parallel(par_bench ? parallel_bench_model(par_model) : build_model(par_model), par_model, par_passes, threads, workers, svg, repeats,
                      {.longest_path_first = !par_fifo, .affinity = !par_no_affinity, .planned = par_planned, .concat_in_place = !par_no_slices, .search_trials = par_search}, par_events);
    }
    if (list) {
      for (const PassInfo& p : all_passes()) std::printf("%-18s %s\n", p.name.c_str(), p.help.c_str());
      return 0;
    }
    if (disc) return discover(max_ops, show_rules);
    if (!load.empty()) return optimise(load_json_file(load), std::filesystem::path(load).stem().string(), passes,
                                       dump_after, out, save, repeats, show);
    int rc = 0;
    for (const char* name : {"resnet", "attention", "mlp"})
      if (model == "all" || model == name) rc |= optimise(build_model(name), name, passes, dump_after, out, save, repeats, show);
    if (model != "all" && model != "resnet" && model != "attention" && model != "mlp") (void)build_model(model);
    return rc;
  } catch (const std::exception& e) {
    std::cerr << "mls-opt: " << e.what() << "\n";
    return 1;
  }
}
