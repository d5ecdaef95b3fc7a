#include "exec/communicator_mpi.h"

#include <mpi.h>

#include <map>

#include "fcp/check.h"

namespace fcp::exec {
namespace {

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "mpi"; }

  RequestId Isend(const void* data, size_t num_bytes, int dest,
                  int tag) override {
    FCP_CHECK(dest >= 0 && dest < size_ && tag >= 0);
    FCP_CHECK(num_bytes <= static_cast<size_t>(INT32_MAX));
    MPI_Request req;
    MPI_Isend(data, static_cast<int>(num_bytes), MPI_BYTE, dest, tag, comm_,
              &req);
    return Store(req);
  }

  RequestId Irecv(void* data, size_t num_bytes, int source, int tag) override {
    FCP_CHECK(source >= 0 && source < size_ && tag >= 0);
    FCP_CHECK(num_bytes <= static_cast<size_t>(INT32_MAX));
    MPI_Request req;
    MPI_Irecv(data, static_cast<int>(num_bytes), MPI_BYTE, source, tag, comm_,
              &req);
    return Store(req);
  }

  void Wait(RequestId request) override {
    auto it = requests_.find(request);
    FCP_CHECK(it != requests_.end());
    MPI_Wait(&it->second, MPI_STATUS_IGNORE);
    requests_.erase(it);
  }

  void Progress() override {
    for (auto& [id, req] : requests_) {
      if (req == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);  // sets req to NULL if done
    }
  }

  void AllReduceSum(float* data, size_t count) override {
    MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT,
                  MPI_SUM, comm_);
  }
  void AllReduceSum(double* data, size_t count) override {
    MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_DOUBLE,
                  MPI_SUM, comm_);
  }
  void Broadcast(void* data, size_t num_bytes, int root) override {
    MPI_Bcast(data, static_cast<int>(num_bytes), MPI_BYTE, root, comm_);
  }
  void Barrier() override { MPI_Barrier(comm_); }

  std::unique_ptr<Communicator> Split(int color, int key) override {
    MPI_Comm out;
    MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out);
    if (out == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(out, true);
  }

 private:
  RequestId Store(MPI_Request req) {
    const RequestId id = next_++;
    requests_[id] = req;
    return id;
  }

  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0;
  int size_ = 1;
  RequestId next_ = 0;
  std::map<RequestId, MPI_Request> requests_;
};

}  // namespace

std::unique_ptr<Communicator> MpiInit(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
}

void MpiFinalize() { MPI_Finalize(); }

void MpiAbort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace fcp::exec
