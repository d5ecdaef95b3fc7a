#include "exec/communicator_mpi.h"

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "fcp/check.h"

namespace fcp::exec {
namespace {

// Process-wide owner of every pending request of every MpiCommunicator when
// the progress thread runs. Only the progress thread touches a posted
// MPI_Request; Wait() sleeps until the thread marks it done. std::map nodes
// are stable, so the thread may test an entry while others are inserted.
class ProgressEngine {
 public:
  ProgressEngine() : thread_([this] { Loop(); }) {}
  ~ProgressEngine() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    posted_.notify_all();
    thread_.join();
  }

  RequestId Post(MPI_Request req) {
    RequestId id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = next_++;
      pending_[id] = Entry{req, false};
    }
    posted_.notify_one();
    return id;
  }

  void Wait(RequestId id) {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = pending_.find(id);
    FCP_CHECK(it != pending_.end());
    done_.wait(lock, [&] { return it->second.done; });
    pending_.erase(it);
  }

 private:
  struct Entry {
    MPI_Request req;
    bool done;
  };

  void Loop() {
    std::vector<Entry*> batch;
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      batch.clear();
      for (auto& [id, e] : pending_)
        if (!e.done) batch.push_back(&e);
      if (batch.empty()) {
        if (stop_) return;
        posted_.wait(lock);
        continue;
      }
      lock.unlock();
      std::vector<Entry*> finished;
      for (Entry* e : batch) {
        int flag = 0;
        MPI_Test(&e->req, &flag, MPI_STATUS_IGNORE);
        if (flag) finished.push_back(e);
      }
      lock.lock();
      for (Entry* e : finished) e->done = true;
      if (!finished.empty()) done_.notify_all();
      if (finished.size() < batch.size())
        posted_.wait_for(lock, std::chrono::microseconds(kProgressPeriodUs));
    }
  }

  std::mutex mu_;
  std::condition_variable posted_, done_;
  std::map<RequestId, Entry> pending_;
  RequestId next_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

ProgressEngine* g_engine = nullptr;  // set by MpiInit in thread mode
bool g_no_progress = false;          // FCP_MPI_PROGRESS=none (a control)

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
    return g_engine ? g_engine->Post(req) : Store(req);
  }

  RequestId Irecv(void* data, size_t num_bytes, int source, int tag) override {
    FCP_CHECK(source >= 0 && source < size_ && tag >= 0);
    FCP_CHECK(num_bytes <= static_cast<size_t>(INT32_MAX));
    MPI_Request req;
    MPI_Irecv(data, static_cast<int>(num_bytes), MPI_BYTE, source, tag, comm_,
              &req);
    return g_engine ? g_engine->Post(req) : Store(req);
  }

  void Wait(RequestId request) override {
    if (g_engine) return g_engine->Wait(request);
    auto it = requests_.find(request);
    FCP_CHECK(it != requests_.end());
    MPI_Wait(&it->second, MPI_STATUS_IGNORE);
    requests_.erase(it);
  }

  void Progress() override {
    if (g_no_progress) return;
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
  const char* mode = std::getenv("FCP_MPI_PROGRESS");
  const bool want_thread = !(mode && (std::strcmp(mode, "poll") == 0 ||
                                      std::strcmp(mode, "none") == 0));
  g_no_progress = mode && std::strcmp(mode, "none") == 0;
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  if (want_thread && provided == MPI_THREAD_MULTIPLE)
    g_engine = new ProgressEngine();
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
}

std::string MpiProgressMode() {
  return g_engine ? "thread" : g_no_progress ? "none" : "poll";
}

void MpiFinalize() {
  delete g_engine;  // joins the thread; every request was waited for
  g_engine = nullptr;
  MPI_Finalize();
}

void MpiAbort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace fcp::exec
