#include "mls/common/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "mls/common/error.hpp"

namespace mls {
namespace {

int default_threads() {
  if (const char* env = std::getenv("MLS_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

/// True on pool workers and on a caller while it runs a parallel region: nested calls run inline.
thread_local bool t_in_parallel = false;

/// Workers take chunk indices 1..chunks-1 of the current region; the caller runs chunk 0.
class Pool {
 public:
  static Pool& instance() {
    static Pool pool;
    return pool;
  }
  int threads() const { return threads_.load(); }
  void set_threads(int n) {
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    threads_.store(n);
  }

  void run(int chunks, const std::function<void(int)>& job) {
    std::lock_guard<std::mutex> run_lock(run_mutex_);  // one parallel region at a time
    ensure_workers(chunks - 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      chunks_ = chunks;
      next_chunk_ = 1;
      pending_ = chunks - 1;
      error_ = nullptr;
    }
    cv_start_.notify_all();
    run_chunk(job, 0);
    std::unique_lock<std::mutex> lock(mutex_);
    cv_done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    chunks_ = next_chunk_ = 0;
    if (error_) std::rethrow_exception(error_);
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_start_.notify_all();
    for (auto& w : workers_) w.join();
  }

 private:
  Pool() : threads_(default_threads()) {}

  void ensure_workers(int n) {
    while (static_cast<int>(workers_.size()) < n) workers_.emplace_back([this] { worker_loop(); });
  }

  void run_chunk(const std::function<void(int)>& job, int chunk) {
    try {
      job(chunk);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }

  void worker_loop() {
    t_in_parallel = true;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_start_.wait(lock, [&] { return stop_ || next_chunk_ < chunks_; });
      if (stop_) return;
      const int chunk = next_chunk_++;
      const auto* job = job_;
      lock.unlock();
      run_chunk(*job, chunk);
      lock.lock();
      if (--pending_ == 0) cv_done_.notify_all();
    }
  }

  std::atomic<int> threads_;
  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable cv_start_, cv_done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  int chunks_ = 0, next_chunk_ = 0, pending_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace

int num_threads() { return Pool::instance().threads(); }

void set_num_threads(int n) {
  MLS_CHECK(n >= 1, "set_num_threads: got ", n, ", expected a count >= 1");
  Pool::instance().set_threads(n);
}

void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (end <= begin) return;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t n = end - begin;
  const std::int64_t max_chunks = (n + grain - 1) / grain;
  const int chunks = static_cast<int>(std::min<std::int64_t>(max_chunks, num_threads()));
  if (chunks <= 1 || t_in_parallel) {
    body(begin, end);
    return;
  }
  const std::int64_t step = (n + chunks - 1) / chunks;
  struct InParallel {
    InParallel() { t_in_parallel = true; }
    ~InParallel() { t_in_parallel = false; }
  } in_parallel;
  Pool::instance().run(chunks, [&](int c) {
    const std::int64_t b = begin + c * step;
    const std::int64_t e = std::min(end, b + step);
    if (b < e) body(b, e);
  });
}

}  // namespace mls
