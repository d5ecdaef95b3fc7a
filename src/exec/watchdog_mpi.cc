#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "exec/clock.h"
#include "exec/watchdog.h"
#include "fcp/check.h"

namespace fcp::exec {
namespace {

constexpr int kTagHeartbeat = 1;

class MpiWatchdog : public Watchdog {
 public:
  explicit MpiWatchdog(double timeout_s) : timeout_s_(timeout_s) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    last_mark_s_ = NowS();
    last_loop_s_ = NowS();
    heard_s_.assign(size_, NowS());
    heard_step_.assign(size_, -1);
    sends_.assign(size_, MPI_REQUEST_NULL);
    beats_.assign(size_, 0);
    thread_ = std::thread([this] { Loop(); });
  }

  ~MpiWatchdog() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    // Our heartbeats are small (eager) sends: they complete locally.
    MPI_Waitall(size_, sends_.data(), MPI_STATUSES_IGNORE);
    // Unwinding from an error that other ranks may not share (the caller
    // then aborts the job): no collective, which could wait forever.
    if (std::uncaught_exceptions() > 0) return;
    MPI_Barrier(comm_);
    Drain();
    MPI_Comm_free(&comm_);
  }

  void Mark(int step) override {
    step_.store(step);
    last_mark_s_.store(NowS());
  }

 private:
  void Drain() {
    int flag = 1;
    while (flag) {
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kTagHeartbeat, comm_, &flag, &st);
      if (!flag) break;
      int64_t step = 0;
      MPI_Recv(&step, 1, MPI_INT64_T, st.MPI_SOURCE, kTagHeartbeat, comm_,
               MPI_STATUS_IGNORE);
      heard_s_[st.MPI_SOURCE] = NowS();
      heard_step_[st.MPI_SOURCE] = step;
    }
  }

  void Loop() {
    const double period_s = std::min(1.0, timeout_s_ / 8);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        int done = 1;
        MPI_Test(&sends_[r], &done, MPI_STATUS_IGNORE);
        if (!done) continue;  // that peer is not draining; do not pile up
        beats_[r] = step_.load();
        MPI_Isend(&beats_[r], 1, MPI_INT64_T, r, kTagHeartbeat, comm_,
                  &sends_[r]);
      }
      Drain();
      const double now = NowS();
      if (now - last_loop_s_ > timeout_s_ / 2) {
        // This thread itself did not run (the process was stopped and has
        // been continued): everything it knows is stale; start over.
        std::fill(heard_s_.begin(), heard_s_.end(), now);
        last_mark_s_.store(now);
      }
      last_loop_s_ = now;
      if (now - last_mark_s_.load() > timeout_s_) Fire(now);
      lock.lock();
      cv_.wait_for(lock, std::chrono::duration<double>(period_s),
                   [this] { return stop_; });
    }
  }

  [[noreturn]] void Fire(double now) {
    std::vector<int> silent;
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && now - heard_s_[r] > timeout_s_) silent.push_back(r);
    if (silent.empty()) {
      std::fprintf(stderr,
                   "rank %d: watchdog: rank %d made no progress for %.1f s at "
                   "step %d (every other rank is alive: a hang in this rank); "
                   "ending the job with exit code %d\n",
                   rank_, rank_, now - last_mark_s_.load(), step_.load(),
                   kWatchdogExitCode);
    } else {
      // The job moves in lockstep per step (one all-reduce each), so the
      // step this rank waits in is the step the silent rank stalled in.
      for (int r : silent)
        std::fprintf(stderr,
                     "rank %d: watchdog: rank %d made no progress for %.1f s "
                     "at step %d (its last heartbeat: step %lld; rank %d "
                     "waits in step %d); ending the job with exit code %d\n",
                     rank_, r, now - heard_s_[r], step_.load(),
                     static_cast<long long>(heard_step_[r]), rank_,
                     step_.load(), kWatchdogExitCode);
    }
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, kWatchdogExitCode);
    std::abort();
  }

  const double timeout_s_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::atomic<int> step_{0};
  std::atomic<double> last_mark_s_{0};
  double last_loop_s_ = 0;      // watchdog thread only
  std::vector<int64_t> beats_;  // per-peer send buffers (stable in flight)
  std::vector<double> heard_s_;
  std::vector<int64_t> heard_step_;
  std::vector<MPI_Request> sends_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Watchdog> StartMpiWatchdog(double timeout_s) {
  FCP_CHECK(timeout_s > 0);
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided != MPI_THREAD_MULTIPLE) return nullptr;
  return std::make_unique<MpiWatchdog>(timeout_s);
}

}  // namespace fcp::exec
