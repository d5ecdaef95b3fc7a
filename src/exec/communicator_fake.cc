// In-process fake Communicator: threads share a mailbox keyed by
// (communicator id, source, destination, tag). Sends are buffered (complete
// at once); receives match messages in posting order, like MPI.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "exec/communicator.h"
#include "fcp/check.h"

namespace fcp::exec {
namespace {

constexpr int kCollectiveTag = 1 << 30;

using MailKey = std::tuple<std::string, int, int, int>;  // comm, src, dst, tag

struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::map<MailKey, std::deque<std::vector<char>>> queues;
};

class FakeCommunicator : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<Mailbox> box, std::string id, int rank,
                   int size)
      : box_(std::move(box)), id_(std::move(id)), rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "fake"; }

  RequestId Isend(const void* data, size_t num_bytes, int dest,
                  int tag) override {
    FCP_CHECK(dest >= 0 && dest < size_ && tag >= 0);
    Push(data, num_bytes, dest, tag);
    return -1;  // buffered: already complete
  }

  RequestId Irecv(void* data, size_t num_bytes, int source, int tag) override {
    FCP_CHECK(source >= 0 && source < size_ && tag >= 0);
    return PostRecv(data, num_bytes, source, tag);
  }

  void Wait(RequestId request) override {
    if (request < 0) return;  // a send
    std::unique_lock<std::mutex> lock(box_->mu);
    auto it = recvs_.find(request);
    FCP_CHECK(it != recvs_.end());
    const MailKey key = it->second.key;
    box_->cv.wait(lock, [&] {
      Deliver(key);
      return recvs_.at(request).done;
    });
    recvs_.erase(request);
  }

  void AllReduceSum(float* data, size_t count) override {
    AllReduceImpl(data, count);
  }
  void AllReduceSum(double* data, size_t count) override {
    AllReduceImpl(data, count);
  }

  void Broadcast(void* data, size_t num_bytes, int root) override {
    FCP_CHECK(root >= 0 && root < size_);
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r)
        if (r != root) Push(data, num_bytes, r, kCollectiveTag);
    } else {
      Wait(PostRecv(data, num_bytes, root, kCollectiveTag));
    }
  }

  void Barrier() override {
    float one = 1.0f;
    AllReduceSum(&one, 1);
  }

  std::unique_ptr<Communicator> Split(int color, int key) override {
    // All-gather (color, key) by point-to-point.
    std::vector<int> mine = {color, key};
    std::vector<int> all(2 * size_);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) Push(mine.data(), sizeof(int) * 2, r, kCollectiveTag);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) {
        all[2 * r] = color;
        all[2 * r + 1] = key;
      } else {
        Wait(PostRecv(&all[2 * r], sizeof(int) * 2, r, kCollectiveTag));
      }
    }
    const int split_index = num_splits_++;
    if (color < 0) return nullptr;
    std::vector<std::pair<int, int>> members;  // (key, parent rank)
    for (int r = 0; r < size_; ++r)
      if (all[2 * r] == color) members.push_back({all[2 * r + 1], r});
    std::sort(members.begin(), members.end());
    int new_rank = -1;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i].second == rank_) new_rank = static_cast<int>(i);
    FCP_CHECK(new_rank >= 0);
    std::string id =
        id_ + "/" + std::to_string(split_index) + ":" + std::to_string(color);
    return std::make_unique<FakeCommunicator>(box_, std::move(id), new_rank,
                                              static_cast<int>(members.size()));
  }

 private:
  struct PendingRecv {
    void* data;
    size_t num_bytes;
    MailKey key;
    bool done = false;
  };

  void Push(const void* data, size_t num_bytes, int dest, int tag) {
    std::vector<char> msg(num_bytes);
    if (num_bytes) std::memcpy(msg.data(), data, num_bytes);
    {
      std::lock_guard<std::mutex> lock(box_->mu);
      box_->queues[{id_, rank_, dest, tag}].push_back(std::move(msg));
    }
    box_->cv.notify_all();
  }

  RequestId PostRecv(void* data, size_t num_bytes, int source, int tag) {
    std::lock_guard<std::mutex> lock(box_->mu);
    const RequestId id = next_request_++;
    MailKey key{id_, source, rank_, tag};
    recvs_[id] = PendingRecv{data, num_bytes, key};
    order_[key].push_back(id);
    return id;
  }

  // Matches queued messages to posted receives in posting order. Lock held.
  void Deliver(const MailKey& key) {
    auto& queue = box_->queues[key];
    auto& order = order_[key];
    while (!queue.empty() && !order.empty()) {
      PendingRecv& recv = recvs_.at(order.front());
      std::vector<char>& msg = queue.front();
      if (msg.size() != recv.num_bytes) {
        std::fprintf(stderr,
                     "fake comm %s: message of %zu bytes, expected %zu\n",
                     id_.c_str(), msg.size(), recv.num_bytes);
        FCP_CHECK(msg.size() == recv.num_bytes);
      }
      if (!msg.empty()) std::memcpy(recv.data, msg.data(), msg.size());
      recv.done = true;
      queue.pop_front();
      order.pop_front();
    }
  }

  template <typename T>
  void AllReduceImpl(T* data, size_t count) {
    // Gather to rank 0, sum in rank order (deterministic), broadcast.
    if (rank_ == 0) {
      std::vector<T> buf(count);
      for (int r = 1; r < size_; ++r) {
        Wait(PostRecv(buf.data(), count * sizeof(T), r, kCollectiveTag));
        for (size_t i = 0; i < count; ++i) data[i] += buf[i];
      }
    } else {
      Push(data, count * sizeof(T), 0, kCollectiveTag);
    }
    Broadcast(data, count * sizeof(T), 0);
  }

  std::shared_ptr<Mailbox> box_;
  std::string id_;
  int rank_;
  int size_;
  int num_splits_ = 0;
  RequestId next_request_ = 0;
  std::map<RequestId, PendingRecv> recvs_;          // guarded by box_->mu
  std::map<MailKey, std::deque<RequestId>> order_;  // guarded by box_->mu
};

}  // namespace

void RunFakeWorld(int num_ranks, const std::function<void(Communicator&)>& fn) {
  FCP_CHECK(num_ranks >= 1);
  auto box = std::make_shared<Mailbox>();
  std::vector<std::unique_ptr<FakeCommunicator>> comms;
  for (int r = 0; r < num_ranks; ++r)
    comms.push_back(std::make_unique<FakeCommunicator>(box, "w", r, num_ranks));
  std::vector<std::exception_ptr> errors(num_ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < num_ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*comms[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace fcp::exec
