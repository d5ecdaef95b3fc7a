#include "exec/profile_transport.h"

#include <fmt/format.h>

#include <chrono>

#include "fcp/check.h"

namespace fcp::exec {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

CommRingTransport::CommRingTransport(Communicator& comm, int tag)
    : comm_(comm), tag_(tag) {
  FCP_CHECK(tag >= 0);
}

CommRingTransport::~CommRingTransport() {
  if (pending_) Wait();
}

void CommRingTransport::Start(const void* send, void* recv, size_t bytes) {
  FCP_CHECK(!pending_);
  const auto t0 = Clock::now();
  const int p = comm_.size(), r = comm_.rank();
  recv_req_ = comm_.Irecv(recv, bytes, (r + p - 1) % p, tag_);
  send_req_ = comm_.Isend(send, bytes, (r + 1) % p, tag_);
  pending_ = true;
  busy_s_ += Since(t0);
}

void CommRingTransport::Wait() {
  if (!pending_) return;
  const auto t0 = Clock::now();
  comm_.Wait(recv_req_);
  comm_.Wait(send_req_);
  pending_ = false;
  busy_s_ += Since(t0);
}

void CommRingTransport::Sync() { comm_.Barrier(); }

std::string CommRingTransport::Describe() const {
  return fmt::format("{}, {} rank{}", comm_.kind(), comm_.size(),
                     comm_.size() == 1 ? "" : "s");
}

ProfileReport RunProfileOnRing(ProfileOptions options, Communicator& comm) {
  CommRingTransport transport(comm);
  options.ring_transport = &transport;
  return RunProfile(options);
}

}  // namespace fcp::exec
