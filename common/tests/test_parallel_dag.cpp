// run_dag (independent tasks on common's pool, with an intra-op budget) and IntraOpBudget.
// Catch2 is not thread-safe: tasks record what they saw, the test thread checks it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/rng.hpp"

namespace {

/// A random DAG of n tasks: task i depends on each earlier task with probability p (seeded).
std::vector<std::vector<int>> random_dag(int n, double p, std::uint64_t seed) {
  mls::Rng rng(seed, "run_dag-test");
  std::vector<std::vector<int>> deps(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < i; ++j)
      if (rng.uniform_double() < p) deps[static_cast<std::size_t>(i)].push_back(j);
  return deps;
}

/// What a run saw: each task's start and end on one global sequence, its worker and budget.
struct Observed {
  std::vector<int> starts, ends, runs, budgets, workers;
  bool budget_seen = true;  // intra_op_threads() inside each task was its budget
  explicit Observed(int n)
      : starts(static_cast<std::size_t>(n), -1), ends(static_cast<std::size_t>(n), -1), runs(static_cast<std::size_t>(n), 0),
        budgets(static_cast<std::size_t>(n), 0), workers(static_cast<std::size_t>(n), -1) {}
};

Observed run_observed(const std::vector<std::vector<int>>& deps, int workers) {
  const int n = static_cast<int>(deps.size());
  Observed o(n);
  std::mutex m;
  int clock = 0;
  mls::run_dag(deps, workers, [&](const mls::TaskContext& c) {
    {
      std::lock_guard<std::mutex> lock(m);
      o.starts[static_cast<std::size_t>(c.task)] = clock++;
      ++o.runs[static_cast<std::size_t>(c.task)];
      o.budgets[static_cast<std::size_t>(c.task)] = c.intra_threads;
      o.workers[static_cast<std::size_t>(c.task)] = c.worker;
    }
    const bool budget_ok = mls::intra_op_threads() == c.intra_threads;
    std::lock_guard<std::mutex> lock(m);
    o.budget_seen &= budget_ok;
    o.ends[static_cast<std::size_t>(c.task)] = clock++;
  });
  return o;
}

}  // namespace

TEST_CASE("run_dag: every task runs once, after all of its dependencies, at 1, 2 and 4 workers", "[common][parallel]") {
  mls::ThreadCountGuard threads(4);
  for (int n : {1, 2, 7, 31, 64}) {
    for (double p : {0.0, 0.1, 0.5}) {
      const auto deps = random_dag(n, p, static_cast<std::uint64_t>(n) * 100 + static_cast<std::uint64_t>(p * 10));
      for (int workers : {1, 2, 4}) {
        INFO("n " << n << " p " << p << " workers " << workers);
        const Observed o = run_observed(deps, workers);
        REQUIRE(o.budget_seen);
        for (int i = 0; i < n; ++i) {
          const auto ii = static_cast<std::size_t>(i);
          REQUIRE(o.runs[ii] == 1);
          REQUIRE(o.workers[ii] >= 0);
          REQUIRE(o.workers[ii] < workers);
          REQUIRE(o.budgets[ii] >= 1);
          REQUIRE(o.budgets[ii] <= 4);
          for (int d : deps[ii]) REQUIRE(o.ends[static_cast<std::size_t>(d)] < o.starts[ii]);
        }
      }
    }
  }
}

TEST_CASE("run_dag: one worker runs ready tasks in index order, each with the whole budget", "[common][parallel]") {
  mls::ThreadCountGuard threads(3);
  // 0 -> {1, 2}, {1, 2} -> 3, 4 alone.
  const std::vector<std::vector<int>> deps{{}, {0}, {0}, {1, 2}, {}};
  std::vector<int> order, budgets, workers;
  mls::run_dag(deps, 1, [&](const mls::TaskContext& c) {
    order.push_back(c.task);
    budgets.push_back(c.intra_threads);
    workers.push_back(c.worker);
  });
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(budgets == std::vector<int>(5, 3));
  CHECK(workers == std::vector<int>(5, 0));
}

TEST_CASE("run_dag: the intra-op budget splits the threads among tasks that can run at once", "[common][parallel]") {
  mls::ThreadCountGuard threads(4);
  SECTION("a chain: each task alone gets every thread") {
    const std::vector<std::vector<int>> deps{{}, {0}, {1}, {2}};
    const Observed o = run_observed(deps, 2);
    CHECK(o.budgets == std::vector<int>{4, 4, 4, 4});
  }
  // Independent tasks that wait for each other (so they are all running at once; the wait gives
  // up after a few seconds, so a scheduler that runs them one at a time fails instead of hanging).
  auto meet = [](std::atomic<int>& started, int n) {
    ++started;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (started.load() < n && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    return started.load() >= n;
  };
  SECTION("two independent tasks on two workers: half each") {
    std::atomic<int> started{0}, met{0};
    std::vector<int> budgets(2, 0);
    mls::run_dag(std::vector<std::vector<int>>(2), 2, [&](const mls::TaskContext& c) {
      budgets[static_cast<std::size_t>(c.task)] = c.intra_threads;
      met += meet(started, 2);
    });
    CHECK(met.load() == 2);
    CHECK(budgets == std::vector<int>{2, 2});
  }
  SECTION("four independent tasks on four workers: one each; their parallel_for stays in budget") {
    std::atomic<int> max_chunks{0}, started{0}, met{0};
    const std::vector<std::vector<int>> deps(4);
    std::vector<int> budgets(4, 0);
    mls::run_dag(deps, 4, [&](const mls::TaskContext& c) {
      budgets[static_cast<std::size_t>(c.task)] = c.intra_threads;
      met += meet(started, 4);
      std::atomic<int> chunks{0};
      mls::parallel_for(0, 1000, 1, [&](std::int64_t, std::int64_t) { ++chunks; });
      int seen = max_chunks.load();
      while (chunks > seen && !max_chunks.compare_exchange_weak(seen, chunks.load())) {}
    });
    CHECK(met.load() == 4);
    CHECK(budgets == std::vector<int>{1, 1, 1, 1});
    CHECK(max_chunks.load() == 1);
  }
  SECTION("the running tasks' budgets never add up to more than the threads") {
    const auto deps = random_dag(40, 0.15, 9);
    std::atomic<int> in_use{0}, worst{0}, bad_cover{0};
    mls::run_dag(deps, 3, [&](const mls::TaskContext& c) {
      const int now = in_use += c.intra_threads;
      int seen = worst.load();
      while (now > seen && !worst.compare_exchange_weak(seen, now)) {}
      // a task's parallel_for uses its budget: every index covered once
      std::vector<std::atomic<int>> hits(257);
      mls::parallel_for(0, 257, 1, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) ++hits[static_cast<std::size_t>(i)];
      });
      for (auto& h : hits) bad_cover += h.load() != 1;
      in_use -= c.intra_threads;
    });
    CHECK(bad_cover.load() == 0);
    CHECK(worst.load() <= 4);
    CHECK(worst.load() >= 1);
  }
}

TEST_CASE("run_dag: the first exception is rethrown, later tasks do not start, nothing hangs", "[common][parallel]") {
  mls::ThreadCountGuard threads(2);
  for (int workers : {1, 2, 4}) {
    INFO("workers " << workers);
    // 0 -> 1 -> 2 -> 3 and 4, 5 independent; task 1 throws.
    const std::vector<std::vector<int>> deps{{}, {0}, {1}, {2}, {}, {}};
    std::vector<std::atomic<int>> ran(6);
    CHECK_THROWS_WITH(mls::run_dag(deps, workers,
                                   [&](const mls::TaskContext& c) {
                                     ++ran[static_cast<std::size_t>(c.task)];
                                     if (c.task == 1) throw std::runtime_error("task 1 failed");
                                   }),
                      "task 1 failed");
    CHECK(ran[1].load() == 1);
    CHECK(ran[2].load() == 0);
    CHECK(ran[3].load() == 0);
    // The pool is usable afterwards.
    std::atomic<int> count{0};
    mls::run_dag(deps, workers, [&](const mls::TaskContext&) { ++count; });
    CHECK(count.load() == 6);
  }
}

TEST_CASE("run_dag: bad input is a named mls::Error", "[common][parallel]") {
  auto nothing = [](const mls::TaskContext&) {};
  CHECK_THROWS_WITH(mls::run_dag({{}, {}}, 0, nothing), Catch::Contains("run_dag: workers is 0, expected a count >= 1"));
  CHECK_THROWS_WITH(mls::run_dag({{}, {5}}, 2, nothing), Catch::Contains("run_dag: task 1 depends on task 5, outside [0, 2)"));
  CHECK_THROWS_WITH(mls::run_dag({{0}}, 2, nothing), Catch::Contains("run_dag: task 0 depends on itself"));
  for (int workers : {1, 2}) {
    CHECK_THROWS_WITH(mls::run_dag({{}, {2}, {1}, {0}}, workers, nothing),
                      Catch::Contains("run_dag: 2 of 4 tasks can never start"));
  }
  CHECK_THROWS_AS(mls::run_dag({{}, {2}, {1}}, 2, nothing), mls::Error);
  CHECK_THROWS_WITH(mls::IntraOpBudget(0), Catch::Contains("IntraOpBudget: got 0 threads, expected a count >= 1"));
  // Changing the thread count from a task would wait for ever on the pool the run holds: it throws.
  CHECK_THROWS_WITH(mls::run_dag({{}, {}}, 2, [](const mls::TaskContext&) { mls::set_num_threads(3); }),
                    Catch::Contains("set_num_threads: called from a task of run_dag (3 threads asked)"));
  // An empty graph runs nothing.
  int ran = 0;
  mls::run_dag({}, 3, [&](const mls::TaskContext&) { ++ran; });
  CHECK(ran == 0);
}

TEST_CASE("run_dag: a task may call run_dag and parallel_for (nested calls run on its thread)", "[common][parallel]") {
  mls::ThreadCountGuard threads(2);
  std::atomic<int> inner{0}, not_worker0{0};
  std::atomic<std::int64_t> sum{0};
  mls::run_dag(std::vector<std::vector<int>>(3), 2, [&](const mls::TaskContext&) {
    mls::run_dag({{}, {0}, {0}}, 2, [&](const mls::TaskContext& c) {
      ++inner;
      not_worker0 += c.worker != 0;
      mls::parallel_for(0, 100, 1, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) sum += i;
      });
    });
  });
  CHECK(inner.load() == 9);
  CHECK(not_worker0.load() == 0);
  CHECK(sum.load() == 9 * 4950);
}

TEST_CASE("IntraOpBudget caps parallel_for and leaves num_threads alone", "[common][parallel]") {
  mls::ThreadCountGuard threads(4);
  auto chunks_of = [] {
    std::atomic<int> chunks{0};
    mls::parallel_for(0, 1000, 1, [&](std::int64_t, std::int64_t) { ++chunks; });
    return chunks.load();
  };
  CHECK(mls::intra_op_threads() == 4);
  CHECK(chunks_of() == 4);
  {
    mls::IntraOpBudget budget(2);
    CHECK(mls::num_threads() == 4);
    CHECK(mls::intra_op_threads() == 2);
    CHECK(chunks_of() == 2);
    {
      mls::IntraOpBudget one(1);
      CHECK(mls::intra_op_threads() == 1);
      CHECK(chunks_of() == 1);
    }
    CHECK(mls::intra_op_threads() == 2);
  }
  {
    mls::IntraOpBudget more(16);  // clamped to num_threads()
    CHECK(mls::intra_op_threads() == 4);
  }
  CHECK(mls::intra_op_threads() == 4);
}

TEST_CASE("parallel: TeamBarrier holds every member until all arrive, stage after stage, and breaks", "[common][parallel]") {
  // Catch2 is not thread-safe: the members count what they saw, the test thread checks it.
  for (int members : {1, 2, 3, 4}) {
    mls::TeamBarrier barrier(members);
    std::atomic<int> arrived{0}, early{0}, refused{0};
    const int stages = 200;
    std::vector<std::thread> team;
    for (int m = 0; m < members; ++m)
      team.emplace_back([&] {
        for (int s = 0; s < stages; ++s) {
          arrived.fetch_add(1);
          if (!barrier.wait()) refused.fetch_add(1);
          // every member of stage s has arrived; none of stage s + 1 can have passed the next wait
          const int seen = arrived.load();
          if (seen < (s + 1) * members || seen > (s + 2) * members) early.fetch_add(1);
          if (!barrier.wait()) refused.fetch_add(1);
        }
      });
    for (auto& t : team) t.join();
    INFO(members << " members");
    CHECK(arrived.load() == stages * members);
    CHECK(early.load() == 0);
    CHECK(refused.load() == 0);
  }
  // A member that fails breaks the barrier: the one waiting for it, and every later wait, get false.
  mls::TeamBarrier barrier(2);
  std::atomic<int> result{-1};
  std::thread waiter([&] { result.store(barrier.wait() ? 1 : 0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  barrier.breaks();
  waiter.join();
  CHECK(result.load() == 0);
  CHECK_FALSE(barrier.wait());
  CHECK_THROWS_WITH(mls::TeamBarrier(0), Catch::Contains("TeamBarrier: got 0 members, expected a count >= 1"));
}

TEST_CASE("run_dag: an idle worker runs chunks of the running task's parallel_for", "[common][parallel]") {
  // Tasks 0 and 1 run together (they meet), one per worker; task 2 reads both, so it runs alone
  // with the whole budget (2 threads) while the other worker has nothing to take. Its
  // parallel_for's two chunks meet too, so two threads run them: its worker's pool helper or
  // the idle worker, whichever claims the chunk first. Over many runs the idle worker's thread
  // must have run some (it spins next to the chunk while the helper may sleep or wait for a CPU).
  mls::ThreadCountGuard threads(2);
  auto meet = [](std::atomic<int>& started, int n) {
    ++started;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (started.load() < n && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    return started.load() >= n;
  };
  int helped = 0, met_all = 0, covered = 0;
  constexpr int kRuns = 100;
  for (int run = 0; run < kRuns; ++run) {
    std::atomic<int> started{0}, met{0}, chunk_started{0}, chunks_met{0};
    std::vector<std::thread::id> worker_thread(2);
    std::vector<std::thread::id> chunk_thread(2);
    int task2_worker = -1;
    std::vector<int> hits(2, 0);
    const std::vector<std::vector<int>> deps{{}, {}, {0, 1}};
    mls::run_dag(deps, 2, [&](const mls::TaskContext& c) {
      if (c.task < 2) {
        worker_thread[static_cast<std::size_t>(c.worker)] = std::this_thread::get_id();
        met += meet(started, 2);
        return;
      }
      task2_worker = c.worker;
      mls::parallel_for(0, 2, 1, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          ++hits[static_cast<std::size_t>(i)];
          chunk_thread[static_cast<std::size_t>(i)] = std::this_thread::get_id();
        }
        chunks_met += meet(chunk_started, 2);
      });
    });
    met_all += met.load() == 2 && chunks_met.load() == 2;
    covered += hits == std::vector<int>{1, 1};
    const std::thread::id idle = worker_thread[static_cast<std::size_t>(1 - task2_worker)];
    helped += chunk_thread[0] == idle || chunk_thread[1] == idle;
  }
  INFO("the idle worker ran a chunk in " << helped << " of " << kRuns << " runs");
  CHECK(met_all == kRuns);
  CHECK(covered == kRuns);
  const char* env = std::getenv("MLS_DAG_HELP");
  if (env != nullptr && std::string(env) == "0") CHECK(helped == 0);  // turned off: idle workers only wait
  else CHECK(helped >= 1);
}

namespace {
/// Tasks 0 and 1 ready at once, task 2 after both (a scheduler of its own, for run_dag's
/// scheduler overload).
class TwoThenOne final : public mls::DagScheduler {
 public:
  int size() const override { return 3; }
  int take() override {
    if (next_ < 2) return next_++;
    if (next_ == 2 && done_ == 2) return next_++;
    return -1;
  }
  void finish(int) override { ++done_; }
  int ready() const override { return next_ < 2 ? 2 - next_ : next_ == 2 && done_ == 2 ? 1 : 0; }

 private:
  int next_ = 0, done_ = 0;
};
}  // namespace

TEST_CASE("run_dag: each stretch an idle worker helps is reported once, with its worker and the task helped", "[common][parallel]") {
  // The test above's DAG: task 2 runs alone with 2 threads; when the idle worker's thread runs one
  // of its chunks, on_help reports it (worker, task 2, start <= end), else nothing is reported.
  // An on_help that throws fails the run like a task: it throws exactly when help happened.
  mls::ThreadCountGuard threads(2);
  auto meet = [](std::atomic<int>& started, int n) {
    ++started;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (started.load() < n && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  };
  int helped_runs = 0, consistent = 0;
  constexpr int kRuns = 60;
  for (int run = 0; run < kRuns; ++run) {
    const bool throwing = run % 2 == 1;
    std::atomic<int> started{0}, chunk_started{0};
    std::vector<std::thread::id> worker_thread(2), chunk_thread(2);
    int task2_worker = -1;
    std::vector<mls::DagHelp> reports;
    std::mutex m;
    TwoThenOne sched;
    bool threw = false;
    try {
      mls::run_dag(
          sched, 2,
          [&](const mls::TaskContext& c) {
            if (c.task < 2) {
              worker_thread[static_cast<std::size_t>(c.worker)] = std::this_thread::get_id();
              meet(started, 2);
              return;
            }
            task2_worker = c.worker;
            mls::parallel_for(0, 2, 1, [&](std::int64_t b, std::int64_t) {
              chunk_thread[static_cast<std::size_t>(b)] = std::this_thread::get_id();
              meet(chunk_started, 2);
            });
          },
          [&](const mls::DagHelp& h) {
            {
              std::lock_guard<std::mutex> lock(m);
              reports.push_back(h);
            }
            if (throwing) throw mls::Error("on_help: refused");
          });
    } catch (const mls::Error& e) {
      threw = std::string(e.what()).find("on_help: refused") != std::string::npos;
    }
    const int idle = 1 - task2_worker;
    const bool helped = task2_worker >= 0 && (chunk_thread[0] == worker_thread[static_cast<std::size_t>(idle)] ||
                                              chunk_thread[1] == worker_thread[static_cast<std::size_t>(idle)]);
    helped_runs += helped;
    bool ok = reports.size() == (helped ? 1u : 0u) && threw == (throwing && helped);
    for (const mls::DagHelp& h : reports) ok = ok && h.worker == idle && h.task == 2 && h.start <= h.end;
    consistent += ok;
  }
  INFO("the idle worker helped in " << helped_runs << " of " << kRuns << " runs");
  CHECK(consistent == kRuns);
}
