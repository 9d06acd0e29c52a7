#include "kernels/thread_pool.h"

#include <memory>

namespace edgesdk::kernels {
namespace {
thread_local bool t_inside_task = false;
}

ThreadPool::ThreadPool(size_t workers) {
  workers_.reserve(workers);
  for (size_t i = 0; i < workers; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_share(size_t participant) {
  const auto& fn = *fn_;
  if (partition_ == Partition::Static) {
    const size_t begin = n_ * participant / participants_;
    const size_t end = n_ * (participant + 1) / participants_;
    if (begin < end) fn(begin, end);
    return;
  }
  for (;;) {
    const size_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= n_) break;
    fn(begin, begin + chunk_ < n_ ? begin + chunk_ : n_);
  }
}

void ThreadPool::worker_loop(size_t index) {
  t_inside_task = true;
  size_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const bool takes_part = index + 1 < participants_;  // participant 0 is the caller
    lock.unlock();
    if (takes_part) run_share(index + 1);
    lock.lock();
    if (takes_part && --pending_ == 0) done_.notify_one();
  }
}

void ThreadPool::parallel_for(size_t n, size_t threads, const std::function<void(size_t, size_t)>& fn,
                              Partition partition, size_t chunk) {
  if (n == 0) return;
  size_t participants = threads < workers_.size() + 1 ? threads : workers_.size() + 1;
  if (participants > n) participants = n;
  if (participants <= 1 || t_inside_task) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    n_ = n;
    participants_ = participants;
    partition_ = partition;
    chunk_ = chunk == 0 ? 1 : chunk;
    next_.store(0, std::memory_order_relaxed);
    pending_ = participants - 1;
    ++generation_;
  }
  wake_.notify_all();
  t_inside_task = true;  // nested parallel_for from the caller's own share runs inline
  run_share(0);
  t_inside_task = false;
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
}

ThreadPool& shared_pool(size_t threads) {
  static std::mutex mutex;
  static std::unique_ptr<ThreadPool> pool;
  static std::vector<std::unique_ptr<ThreadPool>> retired;  // outgrown pools stay alive: a
  // concurrent caller may still hold a reference to one
  std::lock_guard<std::mutex> lock(mutex);
  const size_t workers = threads > 1 ? threads - 1 : 0;
  if (!pool || pool->workers() < workers) {
    if (pool) retired.push_back(std::move(pool));
    pool = std::make_unique<ThreadPool>(workers);
  }
  return *pool;
}

void parallel_for(size_t n, size_t threads, const std::function<void(size_t, size_t)>& fn,
                  Partition partition, size_t chunk) {
  if (threads <= 1 || n <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  shared_pool(threads).parallel_for(n, threads, fn, partition, chunk);
}

size_t hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

}  // namespace edgesdk::kernels
