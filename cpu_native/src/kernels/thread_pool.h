// A fixed-size pool of std::threads running parallel_for over tiles; no OpenMP. The caller's
// thread works too, so `threads` = 1 runs inline with no synchronisation at all.
//
// Hand-off: workers spin (with a CPU pause) for a while after each job before they sleep on a
// condition variable, and the caller spins while it waits for them. A network runs one
// parallel_for per layer with only microseconds of Python between them; waking a sleeping thread
// costs tens to hundreds of microseconds (a futex wake and, in a VM, an IPI to a halted vCPU),
// which on 0.1-0.5 ms layers ate most of what the second thread saved. The spin time is
// EDGESDK_CPU_SPIN_US microseconds (default 1000; 0 = always sleep); after the first 20 us a spinning
// thread yields its core at every poll, so oversubscription (another busy process) costs little.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace edgesdk::kernels {

enum class Partition {
  Static,   // participant t gets the contiguous range [t*n/T, (t+1)*n/T): no contention
  // Participant t starts on the static range's chunks of `chunk` tiles, in order, and when its own
  // run out takes chunks from the far end of the others' (pthreadpool's scheme). Balances load like
  // a shared counter, but each thread keeps the tiles it would get statically: consecutive layers
  // split the same way, so a thread mostly reads what it wrote itself, from its own core's cache (a
  // shared counter hands alternate tiles to alternate threads, and half of every layer's input then
  // comes from the other core; on MobileNetV2 that cost 2-thread scaling 1.8x -> 1.5x on layers).
  Dynamic,
};

class ThreadPool {
 public:
  explicit ThreadPool(size_t workers, uint64_t spin_ns);
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
  uint64_t await_job(uint64_t seen);  // the next job's state word, or kStop
  void finish_share();

  // One word for what a worker must read consistently: the job's generation (bits 16+) and its
  // participant count (bits 0-15). A worker that does not take part reads nothing else, so it
  // never sees a half-published job; one that takes part holds the caller in place until it
  // has finished, so the other job fields stay stable while it reads them.
  static constexpr uint64_t kStop = ~uint64_t{0};
  static uint64_t participants_of(uint64_t state) { return state & 0xffff; }

  std::vector<std::thread> workers_;
  const uint64_t spin_ns_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;       // guards the sleeping paths only
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<uint64_t> state_{0};
  std::atomic<size_t> pending_{0};  // participants (callers excluded) still working
  // The current job, valid for participants while pending_ > 0.
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_ = 0, chunk_ = 1;
  Partition partition_ = Partition::Dynamic;
  // Dynamic: each participant's remaining chunks [start, end), `left` of them unclaimed. The owner
  // claims from start, thieves from end; `left` decides who gets the last one (it may go negative).
  struct alignas(64) Share {
    std::atomic<size_t> start{0}, end{0};
    std::atomic<ptrdiff_t> left{0};
  };
  std::unique_ptr<Share[]> shares_;
};

// Process-wide pool with at least threads-1 workers (grown on demand, never shrunk).
ThreadPool& shared_pool(size_t threads);

// parallel_for on the shared pool; threads <= 1 (or n <= 1) runs inline.
void parallel_for(size_t n, size_t threads, const std::function<void(size_t, size_t)>& fn,
                  Partition partition = Partition::Dynamic, size_t chunk = 1);

// Number of hardware threads (at least 1).
size_t hardware_threads();

// The spin time before a waiting thread sleeps, from EDGESDK_CPU_SPIN_US (read once).
uint64_t spin_nanoseconds();

}  // namespace edgesdk::kernels
