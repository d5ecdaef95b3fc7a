// Watchdog for MPI jobs: a rank that makes no progress for `timeout_s` ends
// the whole job with a message naming the stalled rank and its step.
//
// Every rank runs a thread that, every heartbeat period (timeout/8, at most
// 1 s), sends its current step to every other rank on a private duplicate of
// MPI_COMM_WORLD and records the heartbeats it receives. A rank whose main
// thread has not called Mark() for timeout_s looks at the heartbeats: a rank
// not heard from for timeout_s (stopped, hung in a system call, dead without
// MPI noticing) is named as the stalled one; if every rank is still beating,
// this rank itself is named (its main thread is stuck, e.g. deadlocked). It
// prints one line `rank R: watchdog: ...` and calls MPI_Abort with
// kWatchdogExitCode, which ends every process of the job.
// Needs MPI_THREAD_MULTIPLE (MpiInit asks for it). Thread-safety: Mark() may
// be called from any thread; construction and destruction are collective
// over MPI_COMM_WORLD, except destruction while an exception unwinds (then
// local, leaving the private communicator to MPI_Finalize or MPI_Abort).
#pragma once

#include <memory>

namespace fcp::exec {

inline constexpr int kWatchdogExitCode = 3;

class Watchdog {
 public:
  virtual ~Watchdog() = default;
  // Records progress of this rank's main thread at `step` (0-based).
  virtual void Mark(int step) = 0;
};

// Collective. timeout_s > 0. Returns nullptr (no watchdog) when the MPI
// library does not provide MPI_THREAD_MULTIPLE.
std::unique_ptr<Watchdog> StartMpiWatchdog(double timeout_s);

}  // namespace fcp::exec
