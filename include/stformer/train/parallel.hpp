// Data-parallel training on a fixed pool of threads.
//
// ThreadPool(T) starts T − 1 threads once; run(n, f) calls f(i) for i in [0, n), task i on
// thread i % T (the caller is thread 0), and returns when all are done. The assignment is
// static and nothing is allocated per call.
//
// Training splits a batch into chunks and the chunks over a fixed number of lanes: lane l owns
// its own activations and gradient accumulator and handles chunks l, l + Lanes, ...; the
// lanes' gradients are then summed in lane order (add_grads). The number of lanes is part of a
// run's configuration; with it fixed, the floating-point operations and their order do not
// depend on the number of threads, so every T gives bit-identical parameters.
//
// Subnormal floats (below 2^-126, ~1.2e-38) are flushed to zero in the pool's tasks, on every
// thread (FlushDenormals, stformer/core/tensor.hpp: FTZ and DAZ on x86, FZ on aarch64; the caller's
// own mode is restored when run returns). Once a model fits its training set, softmax tails and
// gradients fall into that range, and x86 cores take a slow microcode path for every operation on
// them: the SPEC pointer run went from 10 ms per iteration at its start to over 100 ms at its end.
// Flushing changes only values below 1.2e-38, and the same way on every thread, so results still do
// not depend on the number of threads.
// Training code only: it needs <thread>, which bare-metal builds do not include.
#pragma once

#include "../core/config.hpp"

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

class ThreadPool {
 public:
  // Throws std::runtime_error when a thread cannot be started (a limit on threads or memory),
  // after stopping the ones that were.
  explicit ThreadPool(size_t threads = 1)
      : size_(threads == 0 ? 1 : threads), spin_(size_ <= std::max<size_t>(std::thread::hardware_concurrency(), 1) ? spin_rounds : 0) {
    workers_.reserve(size_ - 1);
    for (size_t t = 1; t < size_; ++t) {
      try {
        workers_.emplace_back([this, t] {
          FlushDenormals flush;
          work(t);
        });
      } catch (const std::exception& e) {
        stop();
        throw std::runtime_error("ThreadPool: could not start thread " + std::to_string(t + 1) + " of " + std::to_string(size_) + ": " + e.what());
      }
    }
  }
  ~ThreadPool() { stop(); }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return size_; }

  // f(i) for i in [0, tasks); task i runs on thread i % size(), tasks of one thread in
  // increasing order, subnormals flushed to zero. An exception thrown by a task is rethrown
  // here (the first one). Forward-only passes call run several times per block: a thread
  // that finishes waits for the next call spinning for spin_rounds pauses (some tens of
  // microseconds) before it sleeps, so that a call costs well under a microsecond when calls
  // follow each other, and an idle pool takes no CPU. (No spinning when the pool has more
  // threads than the machine: a spinning thread would take a core from one that works.)
  template <class F>
  void run(size_t tasks, F&& f) {
    using Fn = std::remove_reference_t<F>;
    FlushDenormals flush;
    if (size_ == 1 || tasks <= 1) {
      for (size_t i = 0; i < tasks; ++i) f(i);
      return;
    }
    fn_ = static_cast<void*>(&f);
    call_ = [](void* fn, size_t i) { (*static_cast<Fn*>(fn))(i); };
    tasks_ = tasks;
    pending_.store(size_ - 1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    share(0);
    for (size_t i = 0; i < spin_ && pending_.load(std::memory_order_acquire) != 0; ++i) pause();
    if (pending_.load(std::memory_order_acquire) != 0) {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) {
      std::exception_ptr e = std::move(error_);
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

 private:
  static constexpr size_t spin_rounds = 1 << 11;
  static void pause() {
#if defined(__SSE2__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  void share(size_t thread) {
    try {
      for (size_t i = thread; i < tasks_; i += size_) call_(fn_, i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }
  void work(size_t thread) {
    size_t seen = 0;
    for (;;) {
      for (size_t i = 0; i < spin_ && generation_.load(std::memory_order_acquire) == seen; ++i) pause();
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        seen = generation_.load(std::memory_order_relaxed);
        if (stop_) return;
      }
      share(thread);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);  // the caller may be about to wait: notify under the lock
        done_.notify_one();
      }
    }
  }

  size_t size_, spin_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::atomic<size_t> generation_{0}, pending_{0};
  size_t tasks_ = 0;
  bool stop_ = false;
  void* fn_ = nullptr;
  void (*call_)(void*, size_t) = nullptr;
  std::exception_ptr error_;
};

// into += from, parameter by parameter (the gradients of two lanes), split over pool.
template <class M, class Pool = Serial>
void add_grads(M& into, const M& from, Pool&& pool = Pool{}) {
  for_each_param_part(
      pool, pool.size(),
      [](size_t, size_t, size_t n, float* x, const float* y) {
        for (size_t i = 0; i < n; ++i) x[i] += y[i];
      },
      into, from);
}

// One batch's loss and gradient, in chunks over a fixed number of lanes L = lanes.size() (a
// std::array, std::vector or std::span of lanes). Each lane holds its own gradient `grad` (an
// object of the model's type), its loss `loss` (double) and whatever else a chunk needs
// (activations, the chunk's inputs). Lane l takes chunks l, l + L, ... : chunk(lane, c) runs
// forward, the loss (with the whole batch's row count, so that chunks add up to the batch) and
// backward for chunk c into lane.grad, and returns the chunk's loss. The lanes' gradients are
// then summed in lane order into lanes[0].grad, and their losses; the sum is returned. The
// arithmetic depends on L, not on the pool's threads: any number of threads gives the same
// bits (lane l runs on thread l % T; threads beyond L wait).
template <class Lanes, class Pool, class F>
double chunked_gradient(Lanes& lanes, size_t chunks, Pool& pool, F&& chunk) {
  const size_t L = std::size(lanes);
  pool.run(L, [&](size_t l) {
    auto& lane = lanes[l];
    zero_grad(lane.grad);
    lane.loss = 0;
    for (size_t c = l; c < chunks; c += L) lane.loss += chunk(lane, c);
  });
  double loss = lanes[0].loss;
  for (size_t l = 1; l < L; ++l) add_grads(lanes[0].grad, lanes[l].grad, pool), loss += lanes[l].loss;
  return loss;
}

}  // namespace stformer
