#include "kernels/thread_pool.h"

#include <chrono>
#include <cstdlib>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace edgesdk::kernels {
namespace {

thread_local bool t_inside_task = false;

using Clock = std::chrono::steady_clock;

// Tells the core this is a spin loop (frees pipeline resources for a sibling hyperthread and
// saves power) without giving up the time slice.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

// Waits for done() by spinning until the deadline; true when done() came first. For the first
// few microseconds (the gap between two layers' jobs) it polls with a CPU pause; after that it
// yields the core at each poll, so that when there are more runnable threads than cores (another
// process, or a session with more threads than the machine has) the thread it waits for gets to
// run instead of this one burning the time slice. The clock is read every 64 polls only.
template <class Done>
bool spin_until(Clock::time_point deadline, Done done) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point hot_end = start + std::chrono::microseconds(20) < deadline
                                        ? start + std::chrono::microseconds(20) : deadline;
  for (unsigned i = 1;; ++i) {
    if (done()) return true;
    if ((i & 63) == 0 && Clock::now() >= hot_end) break;
    cpu_relax();
  }
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::yield();
  }
  return done();
}

}  // namespace

uint64_t spin_nanoseconds() {
  static const uint64_t ns = [] {
    const char* text = std::getenv("EDGESDK_CPU_SPIN_US");
    if (text == nullptr || *text == '\0') return uint64_t{1000} * 1000;
    char* end = nullptr;
    const unsigned long long us = std::strtoull(text, &end, 10);
    return (end != nullptr && *end == '\0') ? uint64_t{us} * 1000 : uint64_t{1000} * 1000;
  }();
  return ns;
}

ThreadPool::ThreadPool(size_t workers, uint64_t spin_ns) : spin_ns_(spin_ns), shares_(new Share[workers + 1]) {
  workers_.reserve(workers);
  for (size_t i = 0; i < workers; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    state_.store(kStop, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_share(size_t participant) {
  const auto& fn = *fn_;
  const size_t participants = participants_of(state_.load(std::memory_order_relaxed));
  if (partition_ == Partition::Static) {
    const size_t begin = n_ * participant / participants;
    const size_t end = n_ * (participant + 1) / participants;
    if (begin < end) fn(begin, end);
    return;
  }
  const auto run_chunk = [&](size_t i) {
    const size_t begin = i * chunk_;
    fn(begin, begin + chunk_ < n_ ? begin + chunk_ : n_);
  };
  // Relaxed is enough: `left` bounds the claims on a share, so the owner's indices (from start up)
  // and the thieves' (from end down) never meet; the job's publication orders the setup.
  Share& own = shares_[participant];
  while (own.left.fetch_sub(1, std::memory_order_relaxed) > 0) run_chunk(own.start.fetch_add(1, std::memory_order_relaxed));
  for (size_t k = 1; k < participants; ++k) {
    Share& other = shares_[(participant + k) % participants];
    while (other.left.fetch_sub(1, std::memory_order_relaxed) > 0)
      run_chunk(other.end.fetch_sub(1, std::memory_order_relaxed) - 1);
  }
}

void ThreadPool::finish_share() {
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    // The lock orders this notify after a caller that found pending_ > 0 has started waiting.
    std::lock_guard<std::mutex> lock(mutex_);
    done_.notify_one();
  }
}

void ThreadPool::worker_loop(size_t index) {
  t_inside_task = true;
  uint64_t seen = 0;
  // A worker spins only for spin_ns_ after its last share: one left out of the jobs (a session
  // with fewer threads than the pool has workers) soon sleeps instead of burning a core.
  Clock::time_point spin_end = Clock::now();
  for (;;) {
    const auto changed = [&] { return state_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(spin_end, changed)) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, changed);
    }
    seen = state_.load(std::memory_order_acquire);
    if (seen == kStop) return;
    if (index + 1 < participants_of(seen)) {  // participant 0 is the caller
      run_share(index + 1);
      finish_share();
      spin_end = Clock::now() + std::chrono::nanoseconds(spin_ns_);
    }
  }
}

void ThreadPool::parallel_for(size_t n, size_t threads, const std::function<void(size_t, size_t)>& fn,
                              Partition partition, size_t chunk) {
  if (n == 0) return;
  size_t participants = threads < workers_.size() + 1 ? threads : workers_.size() + 1;
  if (participants > n) participants = n;
  if (participants > 0xffff) participants = 0xffff;
  if (participants <= 1 || t_inside_task) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  fn_ = &fn;
  n_ = n;
  partition_ = partition;
  chunk_ = chunk == 0 ? 1 : chunk;
  if (partition == Partition::Dynamic) {
    const size_t chunks = (n + chunk_ - 1) / chunk_;
    for (size_t t = 0; t < participants; ++t) {
      const size_t begin = chunks * t / participants, end = chunks * (t + 1) / participants;
      shares_[t].start.store(begin, std::memory_order_relaxed);
      shares_[t].end.store(end, std::memory_order_relaxed);
      shares_[t].left.store(static_cast<ptrdiff_t>(end - begin), std::memory_order_relaxed);
    }
  }
  pending_.store(participants - 1, std::memory_order_relaxed);
  {
    // Published under the lock so a worker between its last check and its sleep cannot miss it.
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t generation = (state_.load(std::memory_order_relaxed) >> 16) + 1;
    state_.store((generation << 16) | participants, std::memory_order_release);
  }
  wake_.notify_all();  // cheap when every worker is spinning (no sleepers, no system call)
  t_inside_task = true;  // nested parallel_for from the caller's own share runs inline
  run_share(0);
  t_inside_task = false;
  const auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(Clock::now() + std::chrono::nanoseconds(spin_ns_), finished)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, finished);
  }
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
    pool = std::make_unique<ThreadPool>(workers, spin_nanoseconds());
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
