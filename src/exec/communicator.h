// Communicator: the point-to-point and collective operations the executor
// needs, with two implementations:
//   - MpiCommunicator (communicator_mpi.cc): OpenMPI, one per process;
//   - the in-process fake (MakeFakeWorld): N threads, one Communicator per
//     rank, sharing a mailbox, so most tests run without mpirun.
//
// Semantics follow MPI: messages between a (source, destination, tag) triple
// on one communicator are delivered in order; collectives must be called by
// every rank of the communicator in the same order. Sizes are in bytes or in
// elements as named. Errors: misuse (bad rank, unknown request) is a bug and
// aborts (FCP_CHECK); a peer that dies makes MPI abort the job.
// Thread-safety: one Communicator is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fcp::exec {

// Handle of a pending non-blocking operation; complete it with Wait().
using RequestId = int64_t;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Non-blocking send of `num_bytes` from `data` to rank `dest` with `tag`
  // (>= 0). `data` must stay valid and unchanged until Wait returns.
  virtual RequestId Isend(const void* data, size_t num_bytes, int dest,
                          int tag) = 0;
  // Non-blocking receive of exactly `num_bytes` into `data` from `source`.
  virtual RequestId Irecv(void* data, size_t num_bytes, int source,
                          int tag) = 0;
  // Blocks until the request completes; the id is then invalid.
  virtual void Wait(RequestId request) = 0;
  // Lets pending requests advance without blocking (MPI: MPI_Test on each;
  // large messages move only while MPI is called). The fake delivers at
  // Isend time, so it has nothing to do.
  virtual void Progress() {}
  void WaitAll(const std::vector<RequestId>& requests) {
    for (RequestId r : requests) Wait(r);
  }

  // In-place element-wise sum over all ranks (collective).
  virtual void AllReduceSum(float* data, size_t count) = 0;
  virtual void AllReduceSum(double* data, size_t count) = 0;
  // Copies `num_bytes` from `root` to every rank (collective).
  virtual void Broadcast(void* data, size_t num_bytes, int root) = 0;
  virtual void Barrier() = 0;

  // Collective over this communicator (like MPI_Comm_split): ranks passing
  // the same `color` >= 0 form a new communicator ordered by `key` (ties by
  // rank); a rank passing color < 0 gets nullptr.
  virtual std::unique_ptr<Communicator> Split(int color, int key) = 0;

  // "mpi" or "fake"; for logs.
  virtual std::string kind() const = 0;
};

// Creates `num_ranks` fake communicators sharing one in-process mailbox and
// runs fn(comm) for each on its own thread; returns when all threads are done.
// Exceptions thrown by fn are rethrown (the first one) after joining.
// Thread-safety: the fake's mailbox is internally synchronised.
void RunFakeWorld(int num_ranks, const std::function<void(Communicator&)>& fn);

}  // namespace fcp::exec
