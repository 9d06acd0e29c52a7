// A fixed-size pool of std::threads running parallel_for over tiles; no OpenMP. The caller's
// thread works too, so `threads` = 1 runs inline with no synchronisation at all.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace edgesdk::kernels {

enum class Partition {
  Static,   // participant t gets the contiguous range [t*n/T, (t+1)*n/T): no contention
  Dynamic,  // participants claim `chunk` tiles at a time from a shared counter: balances load
};

class ThreadPool {
 public:
  explicit ThreadPool(size_t workers);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t workers() const { return workers_.size(); }

  // Calls fn(begin, end) over [0, n) split among min(threads, workers()+1) participants (the
  // caller included) and returns when all tiles are done. Calls from inside a task, or while
  // another parallel_for runs, are serialised (nested ones run inline).
  void parallel_for(size_t n, size_t threads, const std::function<void(size_t, size_t)>& fn,
                    Partition partition = Partition::Dynamic, size_t chunk = 1);

 private:
  void worker_loop(size_t index);
  void run_share(size_t participant);

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // The current job (valid while a generation is in flight).
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_ = 0, participants_ = 0, chunk_ = 1;
  Partition partition_ = Partition::Dynamic;
  std::atomic<size_t> next_{0};
  size_t generation_ = 0;
  size_t pending_ = 0;
  bool stop_ = false;
};

// Process-wide pool with at least threads-1 workers (grown on demand, never shrunk).
ThreadPool& shared_pool(size_t threads);

// parallel_for on the shared pool; threads <= 1 (or n <= 1) runs inline.
void parallel_for(size_t n, size_t threads, const std::function<void(size_t, size_t)>& fn,
                  Partition partition = Partition::Dynamic, size_t chunk = 1);

// Number of hardware threads (at least 1).
size_t hardware_threads();

}  // namespace edgesdk::kernels
