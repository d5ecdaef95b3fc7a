#include "profile/cpu_target.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>

#include "fcp/check.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"

namespace fcp::profile {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU time of the calling thread: immune to preemption by other processes on a
// shared machine (the kernels are single-threaded, OpenBLAS at 1 thread).
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) +
         1e-9 * static_cast<double>(ts.tv_nsec);
}

// The default RingTransport: a persistent helper thread performs one memcpy
// at a time (the "peer" side of a ring step), overlapped with the compute
// thread. busy_s() is the helper's CPU time spent copying.
class InProcessCopyTransport : public RingTransport {
 public:
  InProcessCopyTransport() : thread_([this] { Loop(); }) {}
  ~InProcessCopyTransport() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Start(const void* send, void* recv, size_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      FCP_CHECK(!pending_);
      dst_ = recv;
      src_ = send;
      bytes_ = bytes;
      pending_ = true;
    }
    cv_.notify_all();
  }
  void Wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !pending_; });
  }
  double busy_s() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return copy_cpu_s_;
  }
  void ResetBusy() override {
    std::lock_guard<std::mutex> lock(mu_);
    copy_cpu_s_ = 0;
  }
  std::string Describe() const override { return "in-process copy"; }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return pending_ || stop_; });
      if (stop_) return;
      void* dst = dst_;
      const void* src = src_;
      const size_t bytes = bytes_;
      lock.unlock();
      const double c0 = ThreadCpuSeconds();
      std::memcpy(dst, src, bytes);
      const double c1 = ThreadCpuSeconds();
      lock.lock();
      copy_cpu_s_ += c1 - c0;
      pending_ = false;
      cv_.notify_all();
    }
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  void* dst_ = nullptr;
  const void* src_ = nullptr;
  size_t bytes_ = 0;
  bool pending_ = false;
  bool stop_ = false;
  double copy_cpu_s_ = 0;
  std::thread thread_;
};

// A transport as seen by the compute thread: counts the CPU and wall time the
// compute thread spends inside Start/Wait, so the overlapped total can count
// the blocked (exposed) part as wall time and nothing twice.
struct Ring {
  RingTransport* t = nullptr;
  double call_cpu_s = 0;
  double call_wall_s = 0;
  void Start(const void* send, void* recv, size_t bytes) {
    const double c0 = ThreadCpuSeconds();
    const auto w0 = Clock::now();
    t->Start(send, recv, bytes);
    call_wall_s += Seconds(w0, Clock::now());
    call_cpu_s += ThreadCpuSeconds() - c0;
  }
  void Wait() {
    const double c0 = ThreadCpuSeconds();
    const auto w0 = Clock::now();
    t->Wait();
    call_wall_s += Seconds(w0, Clock::now());
    call_cpu_s += ThreadCpuSeconds() - c0;
  }
  void Reset() {
    t->ResetBusy();
    call_cpu_s = 0;
    call_wall_s = 0;
  }
};

std::vector<float> RandomVec(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Zigzag positions of `rank` for a sequence of `len` tokens on `d` ranks:
// chunks rank and 2d-1-rank of ceil(len / 2d) tokens (the tail may be short).
std::vector<int64_t> ZigzagPositions(int64_t len, int d, int rank) {
  std::vector<int64_t> pos;
  if (d == 1) {
    for (int64_t t = 0; t < len; ++t) pos.push_back(t);
    return pos;
  }
  const int64_t half = (len + 2 * d - 1) / (2 * d);
  for (int64_t c : {int64_t{rank}, int64_t{2 * d - 1 - rank}})
    for (int64_t t = c * half; t < std::min(len, (c + 1) * half); ++t)
      pos.push_back(t);
  return pos;
}

// Everything one rank holds for one sequence: its queries (per head), the KV
// blocks of every ring source (per kv head), gradients and scratch.
struct SeqState {
  int d = 1;
  bool causal = true;
  std::vector<int64_t> qpos;
  std::vector<std::vector<int64_t>> kpos;                 // [src]
  std::vector<std::vector<float>> q, out, lse, dq, dout;  // [head]
  std::vector<std::vector<float>> k, v, dk, dv;  // [src * kv_heads + kvh]
  std::vector<float> tmp_out, tmp_lse;
  std::vector<float> send, recv;  // one step's KV (+dKV) message
};

struct Workload {
  CpuLayerShape shape;
  int d = 1;
  int64_t m = 0;  // tokens on this rank
  std::vector<SeqState> seqs;
  // GEMM operands: x [m, H], weights, activations.
  std::vector<float> x, w_qkv, w_o, w_gu, w_down, qkv, attn, y, gu, act, y2, dy,
      dx, dw;
};

void GemmsForward(Workload& w) {
  const auto& s = w.shape;
  const int m = static_cast<int>(w.m), H = s.hidden;
  const int dq = s.q_heads * s.head_dim, dkv = s.kv_heads * s.head_dim;
  kernels::Linear(w.x.data(), w.w_qkv.data(), m, dq + 2 * dkv, H, w.qkv.data());
  kernels::Linear(w.attn.data(), w.w_o.data(), m, H, dq, w.y.data());
  kernels::Linear(w.y.data(), w.w_gu.data(), m, 2 * s.ffn, H, w.gu.data());
  kernels::Linear(w.act.data(), w.w_down.data(), m, H, s.ffn, w.y2.data());
}

// Backward of each linear y = x Wᵀ: dX = dY W, dW = dYᵀ X.
void GemmsBackward(Workload& w) {
  const auto& s = w.shape;
  const int m = static_cast<int>(w.m), H = s.hidden;
  const int dq = s.q_heads * s.head_dim, dkv = s.kv_heads * s.head_dim;
  struct Lin {
    const float* wt;
    int out, in;
    const float* xin;
  };
  const Lin lins[4] = {{w.w_down.data(), H, s.ffn, w.act.data()},
                       {w.w_gu.data(), 2 * s.ffn, H, w.y.data()},
                       {w.w_o.data(), H, dq, w.attn.data()},
                       {w.w_qkv.data(), dq + 2 * dkv, H, w.x.data()}};
  for (const Lin& l : lins) {
    kernels::Gemm(false, false, m, l.in, l.out, 1.f, w.dy.data(), l.out, l.wt,
                  l.in, 0.f, w.dx.data(), l.in);
    kernels::Gemm(true, false, l.out, l.in, m, 1.f, w.dy.data(), l.out, l.xin,
                  l.in, 0.f, w.dw.data(), l.in);
  }
}

// One ring pass over all sequences. `ring` (may be null) moves the message of
// the next step while this step computes; `copy_only` does only the traffic.
struct PassTimes {
  double attention_s = 0;
};

void AttentionPasses(Workload& w, Ring* copier, bool copy_only,
                     PassTimes* times) {
  const auto& s = w.shape;
  const int dh = s.head_dim, group = s.q_heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  double attn = 0;
  for (SeqState& st : w.seqs) {
    const int n = static_cast<int>(st.qpos.size());
    const size_t fwd_bytes = st.send.size() * sizeof(float) / 2;  // KV only
    const size_t bwd_bytes = st.send.size() * sizeof(float);      // KV + dKV
    // Forward: d steps; step i (< d-1) overlaps receiving the next block.
    for (int step = 0; step < st.d; ++step) {
      const bool has_next = step + 1 < st.d;
      if (has_next && copier)
        copier->Start(st.send.data(), st.recv.data(), fwd_bytes);
      if (!copy_only) {
        const int src = (st.d - step) % st.d;
        const double a0 = ThreadCpuSeconds();
        for (int h = 0; h < s.q_heads; ++h) {
          const size_t kvi = static_cast<size_t>(src) * s.kv_heads + h / group;
          const int nk = static_cast<int>(st.kpos[src].size());
          float* o = step == 0 ? st.out[h].data() : st.tmp_out.data();
          float* l = step == 0 ? st.lse[h].data() : st.tmp_lse.data();
          kernels::AttentionForward(
              st.q[h].data(), st.k[kvi].data(), st.v[kvi].data(), n, nk, dh,
              st.qpos.data(), st.kpos[src].data(), st.causal, scale, o, l);
          if (step > 0)
            kernels::MergePartial(st.out[h].data(), st.lse[h].data(),
                                  st.tmp_out.data(), st.tmp_lse.data(), n, dh);
        }
        attn += ThreadCpuSeconds() - a0;
      }
      if (has_next && copier) copier->Wait();
    }
    // Backward: d steps, KV travels with its dKV; then dKV returns home.
    for (int step = 0; step < st.d; ++step) {
      const bool has_next = step + 1 < st.d;
      if (has_next && copier)
        copier->Start(st.send.data(), st.recv.data(), bwd_bytes);
      if (!copy_only) {
        const int src = (st.d - step) % st.d;
        const double a0 = ThreadCpuSeconds();
        for (int h = 0; h < s.q_heads; ++h) {
          const size_t kvi = static_cast<size_t>(src) * s.kv_heads + h / group;
          const int nk = static_cast<int>(st.kpos[src].size());
          kernels::AttentionBackward(
              st.q[h].data(), st.k[kvi].data(), st.v[kvi].data(),
              st.out[h].data(), st.dout[h].data(), st.lse[h].data(), n, nk, dh,
              st.qpos.data(), st.kpos[src].data(), st.causal, scale,
              st.dq[h].data(), st.dk[kvi].data(), st.dv[kvi].data());
        }
        attn += ThreadCpuSeconds() - a0;
      }
      if (has_next && copier) copier->Wait();
    }
    if (st.d > 1 && copier) {
      copier->Start(st.send.data(), st.recv.data(), fwd_bytes);  // dKV home
      copier->Wait();
    }
  }
  if (times) times->attention_s = attn;
}

Workload Build(const CpuLayerShape& shape,
               const std::vector<Sequence>& sequences, int d) {
  std::mt19937 rng(12345);
  Workload w;
  w.shape = shape;
  w.d = d;
  const int dh = shape.head_dim;
  for (const Sequence& seq : sequences) {
    SeqState st;
    st.d = d;
    st.causal = seq.eta < 0.5;
    st.qpos = ZigzagPositions(seq.length_tokens, d, 0);
    const size_t n = st.qpos.size();
    w.m += static_cast<int64_t>(n);
    for (int src = 0; src < d; ++src)
      st.kpos.push_back(ZigzagPositions(seq.length_tokens, d, src));
    for (int h = 0; h < shape.q_heads; ++h) {
      st.q.push_back(RandomVec(n * dh, rng));
      st.dout.push_back(RandomVec(n * dh, rng));
      st.out.emplace_back(n * dh);
      st.lse.emplace_back(n);
      st.dq.emplace_back(n * dh);
    }
    for (int src = 0; src < d; ++src)
      for (int h = 0; h < shape.kv_heads; ++h) {
        const size_t nk = st.kpos[src].size();
        st.k.push_back(RandomVec(nk * dh, rng));
        st.v.push_back(RandomVec(nk * dh, rng));
        st.dk.emplace_back(nk * dh);
        st.dv.emplace_back(nk * dh);
      }
    st.tmp_out.resize(n * dh);
    st.tmp_lse.resize(n);
    // Message of one step: K and V (fp32) of all kv heads, plus dK and dV.
    st.send = RandomVec(n * dh * shape.kv_heads * 4, rng);
    st.recv.resize(st.send.size());
    w.seqs.push_back(std::move(st));
  }
  const size_t m = static_cast<size_t>(w.m);
  const int H = shape.hidden, dq = shape.q_heads * dh,
            dkv = shape.kv_heads * dh;
  const int widest = std::max({dq + 2 * dkv, 2 * shape.ffn, H});
  w.x = RandomVec(m * H, rng);
  w.w_qkv = RandomVec(size_t(dq + 2 * dkv) * H, rng);
  w.w_o = RandomVec(size_t(H) * dq, rng);
  w.w_gu = RandomVec(size_t(2 * shape.ffn) * H, rng);
  w.w_down = RandomVec(size_t(H) * shape.ffn, rng);
  w.qkv.resize(m * (dq + 2 * dkv));
  w.attn = RandomVec(m * dq, rng);
  w.y.resize(m * H);
  w.gu.resize(m * 2 * shape.ffn);
  w.act = RandomVec(m * shape.ffn, rng);
  w.y2.resize(m * H);
  w.dy = RandomVec(m * widest, rng);
  w.dx.resize(m * widest);
  w.dw.resize(size_t(widest) * widest);
  return w;
}

void ResetGrads(Workload& w) {
  for (auto& st : w.seqs) {
    for (auto& g : st.dq) std::fill(g.begin(), g.end(), 0.f);
    for (auto& g : st.dk) std::fill(g.begin(), g.end(), 0.f);
    for (auto& g : st.dv) std::fill(g.begin(), g.end(), 0.f);
  }
}

}  // namespace

std::unique_ptr<RingTransport> MakeInProcessCopyTransport() {
  return std::make_unique<InProcessCopyTransport>();
}

CpuRankTiming MeasureCpuRank(const CpuLayerShape& shape,
                             const std::vector<Sequence>& sequences, int degree,
                             int repeats, RingTransport* transport) {
  FCP_CHECK(degree >= 1 && repeats >= 1 && !sequences.empty());
  kernels::SetBlasThreads(1);
  Workload w = Build(shape, sequences, degree);
  std::unique_ptr<RingTransport> own;
  if (!transport && degree > 1) {
    own = MakeInProcessCopyTransport();
    transport = own.get();
  }
  Ring copier{transport};
  std::vector<double> comp, comm, total, attn;
  // Timing: compute is the main thread's CPU time; communication is the
  // transport's busy time (the helper's CPU time spent copying in-process;
  // the wall time of the exchange over MPI); the overlapped total is the main
  // thread's CPU time outside the transport calls plus the wall time inside
  // them (the exposed communication: blocked on a copy, or MPI moving or
  // waiting for bytes). CPU clocks keep other jobs on a shared machine out of
  // the figures; the minimum over repeats is reported.
  for (int r = 0; r < repeats + 1; ++r) {  // first round warms caches and pages
    ResetGrads(w);
    PassTimes pt;
    double t0 = ThreadCpuSeconds();
    GemmsForward(w);
    AttentionPasses(w, nullptr, false, &pt);
    GemmsBackward(w);
    const double c = ThreadCpuSeconds() - t0;

    double m = 0;
    if (degree > 1) {
      transport->Sync();
      copier.Reset();
      AttentionPasses(w, &copier, /*copy_only=*/true, nullptr);
      m = transport->busy_s();
      transport->Sync();
    }

    ResetGrads(w);
    if (degree > 1) copier.Reset();
    t0 = ThreadCpuSeconds();
    GemmsForward(w);
    AttentionPasses(w, degree > 1 ? &copier : nullptr, false, nullptr);
    GemmsBackward(w);
    const double t =
        ThreadCpuSeconds() - t0 - copier.call_cpu_s + copier.call_wall_s;
    if (r == 0) continue;
    comp.push_back(c);
    comm.push_back(m);
    total.push_back(t);
    attn.push_back(pt.attention_s);
  }
  CpuRankTiming out;
  out.compute_s = *std::min_element(comp.begin(), comp.end());
  out.comm_s = *std::min_element(comm.begin(), comm.end());
  out.total_s = *std::min_element(total.begin(), total.end());
  out.attention_s = *std::min_element(attn.begin(), attn.end());
  out.tokens_on_rank = w.m;
  double bytes = 0;
  for (const auto& st : w.seqs)
    if (degree > 1)
      bytes += st.send.size() * sizeof(float) *
               (0.5 * (degree - 1) + (degree - 1) + 0.5);
  out.comm_bytes = bytes;
  return out;
}

double MeasureCopyBandwidth(size_t bytes, int repeats) {
  std::vector<float> a(bytes / sizeof(float), 1.f), b(a.size());
  std::vector<double> t;
  for (int r = 0; r < repeats + 1; ++r) {
    const double t0 = ThreadCpuSeconds();
    std::memcpy(b.data(), a.data(), a.size() * sizeof(float));
    const double s = ThreadCpuSeconds() - t0;
    if (r > 0) t.push_back(s);
  }
  return static_cast<double>(bytes) /
         std::max(1e-9, *std::min_element(t.begin(), t.end()));
}

double MeasureTransportBandwidth(RingTransport& transport, size_t bytes,
                                 int repeats) {
  FCP_CHECK(bytes > 0 && repeats >= 1);
  std::vector<char> send(bytes, 1), recv(bytes);
  double best = 0;
  for (int r = 0; r < repeats + 1; ++r) {
    transport.Sync();
    transport.ResetBusy();
    transport.Start(send.data(), recv.data(), bytes);
    transport.Wait();
    const double s = transport.busy_s();
    if (r > 0 && (best == 0 || s < best)) best = s;
  }
  return static_cast<double>(bytes) / std::max(1e-9, best);
}

double CpuLayerMemPerToken(const CpuLayerShape& s) {
  const double dq = s.q_heads * s.head_dim, dkv = s.kv_heads * s.head_dim;
  // fp32 activations kept for backward: x, qkv, attention out + lse, y,
  // gate/up, activation (per token), plus the ring's KV/dKV buffers.
  return 4.0 * (s.hidden + dq + 2 * dkv + dq + 1 + s.hidden + 2.0 * s.ffn +
                s.ffn) +
         4.0 * 4.0 * dkv;
}

double CpuLayerStaticBytes(const CpuLayerShape& s) {
  const double dq = s.q_heads * s.head_dim, dkv = s.kv_heads * s.head_dim;
  const double params =
      s.hidden * (dq + 2 * dkv) + dq * s.hidden + 3.0 * s.hidden * s.ffn;
  return params * 16.0;  // fp32 weights, grads, Adam m and v
}

}  // namespace fcp::profile
