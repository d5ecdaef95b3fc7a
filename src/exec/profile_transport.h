// The profiler's ring traffic over the executor's Communicator (MPI under
// mpirun, or the in-process fake in tests), so `fcp profile --target cpu`
// measures real Isend/Irecv between processes. fcp_core (src/profile) only
// knows the abstract profile::RingTransport; this library supplies the MPI one.
//
// Lockstep design: every rank of the communicator runs the SAME measurement
// loop (RunProfile with identical options), so all ranks post matching
// sends/receives in the same order; each rank times its own copy of rank 0's
// share, and only rank 0's report is meant to be printed. The ranks emulate
// the ring of a CP group of any degree d: a ring step is always "send to
// (rank + 1) mod P, receive from (rank - 1) mod P" of the P-rank
// communicator, with d's message sizes and d - 1 steps, so degrees d > P fold
// the ring onto the P processes (each rank still has exactly two real
// neighbours, as in a ring of d; what is not emulated is d - P more processes
// sharing the memory bandwidth). P = 1 and d = 1 exchange nothing over MPI
// (P = 1: the rank sends to itself).
#pragma once

#include <memory>
#include <string>

#include "exec/communicator.h"
#include "fcp/profiler.h"
#include "profile/cpu_target.h"

namespace fcp::exec {

// A RingTransport over `comm` (not owned; must outlive the transport).
// Start posts Irecv from (rank - 1) mod P and Isend to (rank + 1) mod P with
// `tag`; Wait completes both. busy_s() is the wall time spent inside
// Start + Wait (MPI moves the bytes inside those calls); Sync() is a barrier.
// Describe(): "<comm.kind()>, P ranks" (e.g. "mpi, 2 ranks").
// Thread-safety: as the communicator (one thread).
class CommRingTransport : public profile::RingTransport {
 public:
  explicit CommRingTransport(Communicator& comm, int tag = 7100);
  ~CommRingTransport() override;

  void Start(const void* send, void* recv, size_t bytes) override;
  void Wait() override;
  double busy_s() const override { return busy_s_; }
  void ResetBusy() override { busy_s_ = 0; }
  void Sync() override;
  std::string Describe() const override;

 private:
  Communicator& comm_;
  int tag_;
  bool pending_ = false;
  RequestId send_req_ = 0, recv_req_ = 0;
  double busy_s_ = 0;
};

// Runs RunProfile(options) on every rank of `comm` with the ring traffic
// through a CommRingTransport (options.ring_transport is overridden).
// Collective: every rank must call it with the same options; every rank
// returns its own report (rank 0's is the one to print). Throws what
// RunProfile throws (InputError for bad options, identically on every rank).
ProfileReport RunProfileOnRing(ProfileOptions options, Communicator& comm);

}  // namespace fcp::exec
