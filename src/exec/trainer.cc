#include "exec/trainer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <span>

#include "exec/clock.h"
#include "fcp/check.h"
#include "fcp/cost_model.h"
#include "fcp/scheduler.h"

namespace fcp::exec {

TextCorpus ListCorpus(const std::string& dir, int64_t min_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InputError("data_dir", "'" + dir + "' is not a directory");
  std::vector<std::pair<std::string, int64_t>> files;
  for (auto it = fs::recursive_directory_iterator(
           dir, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    std::error_code e2;
    if (!it->is_regular_file(e2) || it->is_symlink(e2)) continue;
    const auto size = static_cast<int64_t>(it->file_size(e2));
    if (!e2 && size >= min_bytes) files.push_back({it->path().string(), size});
  }
  if (files.empty())
    throw InputError("data_dir", "no file of at least " +
                                     std::to_string(min_bytes) + " bytes in '" +
                                     dir + "'");
  std::sort(files.begin(), files.end());
  TextCorpus c;
  for (auto& [p, s] : files) {
    c.paths.push_back(p);
    c.sizes_bytes.push_back(s);
  }
  return c;
}

TextCorpus LengthsCorpus(const std::vector<int64_t>& lengths,
                         const TextCorpus& text) {
  if (lengths.empty()) throw InputError("lengths", "no sequence length");
  FCP_CHECK(!text.paths.empty());
  std::vector<int> by_size(text.paths.size());
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(), [&](int a, int b) {
    return text.sizes_bytes[a] < text.sizes_bytes[b];
  });
  TextCorpus c;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t want = std::min(lengths[i], text.sizes_bytes[by_size.back()]);
    // First file (by size) that is long enough; then one of those in turn.
    const auto first = std::lower_bound(
        by_size.begin(), by_size.end(), want,
        [&](int f, int64_t len) { return text.sizes_bytes[f] < len; });
    const auto long_enough = static_cast<size_t>(by_size.end() - first);
    const int f = *(first + static_cast<std::ptrdiff_t>(i % long_enough));
    c.paths.push_back(text.paths[f]);
    c.sizes_bytes.push_back(want);
  }
  return c;
}

std::vector<int> BatchFiles(const TextCorpus& corpus, int step, int gbs,
                            uint64_t seed) {
  const int n = static_cast<int>(corpus.paths.size());
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull +
                      static_cast<uint64_t>(step));
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  const int take = std::min(gbs, n);
  std::vector<int> out;
  for (int i = 0; i < take; ++i) {  // partial Fisher-Yates
    const int j = i + static_cast<int>(rng() % static_cast<uint64_t>(n - i));
    std::swap(idx[i], idx[j]);
    out.push_back(idx[i]);
  }
  return out;
}

GlobalBatch LoadBatch(const TextCorpus& corpus, const std::vector<int>& files,
                      int64_t max_len) {
  GlobalBatch b;
  for (int f : files) {
    const int64_t len = std::min(corpus.sizes_bytes[f], max_len);
    std::vector<uint8_t> bytes(len);
    std::ifstream in(corpus.paths[f], std::ios::binary);
    in.read(reinterpret_cast<char*>(bytes.data()), len);
    if (in.gcount() != len)
      throw InputError("data_dir", "cannot read " + corpus.paths[f]);
    b.sequences.push_back(std::move(bytes));
    b.eta.push_back(0.0);
  }
  return b;
}

// Per layer and token, fwd+bwd = 3x fwd FLOPs:
//   linear: 2·(4D² + 2DF) per layer, plus 2·D·V for the unembedding;
//   attention (causal): QKᵀ and PV are 4·D FLOPs per (query, key) pair, half
//   the pairs visible -> 2·D per token² per layer, times 3.5 for fwd+bwd
//   (recomputation-free backward ≈ 2.5x forward).
// Ring traffic per token of the group over one step (alpha3): K and V
// forward (2·D floats) plus K, V, dK, dV backward (4·D) per layer.
// Memory: activations kept for the backward ≈ (9·D + 2·F + 2·H) floats per
// token per layer + logits (V) + final norm (2·D); model states = weights,
// gradients and two AdamW moments.
CostModel CpuCostModel(const ModelConfig& cfg, double mem_capacity_bytes,
                       double gemm_flops_per_s, double attn_flops_per_s,
                       double p2p_bytes_per_s) {
  const double D = cfg.dim, F = cfg.ffn, V = cfg.vocab, L = cfg.layers,
               H = cfg.heads;
  CostModel cm;
  cm.alpha1 = L * 2.0 * D * 3.5 / attn_flops_per_s;
  cm.alpha2 = 3.0 * (L * 2.0 * (4 * D * D + 2 * D * F) + 2.0 * D * V) /
              gemm_flops_per_s;
  cm.beta1 = 2e-4;
  cm.alpha3 = L * 6.0 * D * 4.0;
  // Fixed cost of a ring on this CPU: 3 ring passes per layer (KV forward,
  // KV and dKV backward), ~d steps each of ~50 µs MPI latency on a shared
  // core; charged as a constant 3·L·4·50 µs (d ≈ 4).
  cm.beta2 = 3.0 * L * 4 * 50e-6;
  cm.bw_intra_node = p2p_bytes_per_s;
  cm.bw_inter_node = p2p_bytes_per_s;
  cm.mem_per_token = 4.0 * (L * (9 * D + 2 * F + 2 * H) + V + 2 * D);
  cm.mem_static = 4.0 * 4.0 * static_cast<double>(MakeParamLayout(cfg).total);
  cm.mem_capacity = mem_capacity_bytes;
  return cm;
}

CostModel CalibrateCpuCostModel(const ModelConfig& cfg,
                                double mem_capacity_bytes) {
  CostModel cm = CpuCostModel(cfg, mem_capacity_bytes);
  const ParamLayout layout = MakeParamLayout(cfg);
  const std::vector<float> w = InitParams(cfg, 1);
  std::vector<float> g(layout.total);
  auto time_len = [&](int64_t len) {
    GlobalBatch b;
    b.sequences.push_back(std::vector<uint8_t>(len));
    for (int64_t i = 0; i < len; ++i)
      b.sequences[0][i] = static_cast<uint8_t>(i * 31);
    b.eta.push_back(0.0);
    const auto layouts = ZigzagLayouts(b.lengths(), b.eta, {0}, 1);
    const ShardBatch shard = MakeShardBatch(layouts[0], b.sequences);
    RingAttentionArgs attn;
    attn.layouts = &layouts;
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const double t0 = NowS();
      ForwardBackward(cfg, layout, w.data(), shard, attn, 1.0f, g.data());
      best = std::min(best, NowS() - t0);
    }
    return best;
  };
  const double s1 = 384, s2 = 1536;
  const double t1 = time_len(384) - cm.beta1, t2 = time_len(1536) - cm.beta1;
  // [s1² s1; s2² s2] [a1; a2] = [t1; t2]
  const double det = s1 * s1 * s2 - s2 * s2 * s1;
  const double a1 = (t1 * s2 - t2 * s1) / det;
  const double a2 = (s1 * s1 * t2 - s2 * s2 * t1) / det;
  if (a1 > 0 && a2 > 0) {  // else keep the derived values (noisy timing)
    cm.alpha1 = a1;
    cm.alpha2 = a2;
  }
  return cm;
}

std::optional<std::string> ValidateTrainOptions(const TrainOptions& o) {
  if (auto e = ValidateModelConfig(o.model)) return e;
  if (!FindStrategy(o.strategy))
    return "strategy: unknown strategy '" + o.strategy + "'";
  if (o.cp_degree < 0) return "cp_degree: must be >= 0";
  if (o.max_len < 2) return "max_len: must be >= 2";
  if (o.gbs < 1) return "gbs: must be >= 1";
  if (o.steps < 1) return "steps: must be >= 1";
  if (!(o.adam.lr > 0) || !std::isfinite(o.adam.lr))
    return "lr: must be a finite number > 0";
  if (!(o.mem_capacity_bytes > 0)) return "mem_capacity: must be > 0";
  if (o.cost) {
    if (auto e = ValidateCostModel(*o.cost)) return e;
  }
  return std::nullopt;
}

std::optional<std::string> PreflightCheck(const TrainOptions& o,
                                          const TextCorpus& corpus,
                                          int world_size) {
  if (auto e = ValidateTrainOptions(o)) return e;
  const CostModel cost =
      o.cost ? *o.cost : CpuCostModel(o.model, o.mem_capacity_bytes);
  constexpr double kMiB = 1 << 20;
  char buf[400];
  if (!(cost.mem_capacity > cost.mem_static)) {
    std::snprintf(buf, sizeof buf,
                  "mem_mb: %.3f MiB per rank is below the model states "
                  "(%.3f MiB: weights, gradients, two AdamW moments)",
                  cost.mem_capacity / kMiB, cost.mem_static / kMiB);
    return std::string(buf);
  }
  int64_t longest = 0;
  for (int64_t s : corpus.sizes_bytes) longest = std::max(longest, s);
  longest = std::min(longest, o.max_len);
  const double need_ranks = std::ceil(cost.mem_per_token * longest /
                                      (cost.mem_capacity - cost.mem_static));
  if (need_ranks > world_size) {
    std::snprintf(buf, sizeof buf,
                  "mem_mb: a sequence of %lld tokens needs %.0f ranks of "
                  "%.3f MiB, only %d ranks (raise --mem-mb or lower --max-len)",
                  static_cast<long long>(longest), need_ranks,
                  cost.mem_capacity / kMiB, world_size);
    return std::string(buf);
  }
  PlanRequest req;
  req.cluster = {world_size, world_size};
  req.cost = cost;
  for (int f : BatchFiles(corpus, 0, o.gbs, o.seed))
    req.sequences.push_back({std::min(corpus.sizes_bytes[f], o.max_len), 0.0});
  PlanOptions po;
  po.strategy = o.strategy;
  po.cp_degree = o.cp_degree;
  po.seed = o.seed;
  try {
    const Plan plan = MakePlan(req, po);
    if (plan.status != PlanStatus::kOk)
      return "strategy: " + o.strategy +
             " finds no feasible plan for global "
             "batch 0" +
             (plan.message.empty() ? "" : ": " + plan.message);
  } catch (const InputError& e) {
    // Planner fields are named as the plan request sees them; say which
    // flag sets them where it is not obvious.
    std::string msg = e.what();
    if (e.field() == "sequences")
      msg = "gbs: " + msg.substr(e.field().size() + 2);
    return msg;
  }
  return std::nullopt;
}

Trainer::Trainer(Communicator& world, TrainOptions options, TextCorpus corpus)
    : world_(world),
      opt_(std::move(options)),
      corpus_(std::move(corpus)),
      // Checked before anything is sized from the options.
      layout_(MakeParamLayout([this]() -> const ModelConfig& {
        if (auto e = PreflightCheck(opt_, corpus_, world_.size()))
          throw InputError::FromMessage(*e);
        return opt_.model;
      }())),
      adam_(layout_, opt_.adam),
      cache_(world) {
  if (opt_.cost) {
    cost_ = *opt_.cost;
  } else if (opt_.calibrate) {
    if (world_.rank() == 0)
      cost_ = CalibrateCpuCostModel(opt_.model, opt_.mem_capacity_bytes);
    world_.Broadcast(&cost_, sizeof cost_, 0);  // plain doubles
  } else {
    cost_ = CpuCostModel(opt_.model, opt_.mem_capacity_bytes);
  }
  if (opt_.learn && world_.rank() == 0) learner_.emplace(cost_);
  params_ = InitParams(opt_.model, opt_.seed);
  // Same seed gives the same weights everywhere; broadcast anyway so that a
  // rank can never start from different weights.
  world_.Broadcast(params_.data(), params_.size() * sizeof(float), 0);
}

Trainer::~Trainer() {
  if (pending_.valid()) pending_.wait();
}

PlanRequest Trainer::RequestFor(int step, const CostModel& cost) const {
  PlanRequest req;
  req.cluster = {world_.size(), world_.size()};  // one node
  req.cost = cost;
  for (int f : BatchFiles(corpus_, step, opt_.gbs, opt_.seed))
    req.sequences.push_back(
        {std::min(corpus_.sizes_bytes[f], opt_.max_len), 0.0});
  return req;
}

Trainer::Planned Trainer::PlanFor(int step, const CostModel& cost) const {
  const double t0 = NowS();
  PlanOptions po;
  po.strategy = opt_.strategy;
  po.cp_degree = opt_.cp_degree;
  po.seed = opt_.seed + static_cast<uint64_t>(step);
  Planned out;
  out.plan = MakePlan(RequestFor(step, cost), po);
  out.cost = cost;
  out.plan_s = NowS() - t0;
  return out;
}

void Trainer::LearnFrom(int step, const Plan& plan,
                        const CostModel& planned_with,
                        const std::vector<double>& micro_batch_s,
                        StepReport& rep) {
  // Every rank's row of micro-batch times (0 where idle), summed into all.
  const size_t num_mb = plan.micro_batches.size();
  std::vector<double> all(static_cast<size_t>(world_.size()) * num_mb, 0.0);
  FCP_CHECK(micro_batch_s.size() == num_mb);
  std::copy(micro_batch_s.begin(), micro_batch_s.end(),
            all.begin() + static_cast<std::ptrdiff_t>(world_.rank() * num_mb));
  world_.AllReduceSum(all.data(), all.size());
  double shared[2 + kNumFittedCoefficients] = {};  // error, groups, then the
                                                   // timing coefficients
  if (world_.rank() == 0) {
    std::vector<double> group_s;
    for (size_t j = 0; j < num_mb; ++j) {
      for (const GroupPlan& g : plan.micro_batches[j].groups) {
        double slowest = 0;
        for (int r : g.ranks) slowest = std::max(slowest, all[r * num_mb + j]);
        // The trainer's requests carry no model shape, which an all-to-all
        // group's estimate needs: such groups are not learnt from.
        const bool learnable = slowest > 0 && g.comm == CommKind::kRing;
        group_s.push_back(learnable ? slowest : std::nan(""));
      }
    }
    const size_t before = learner_->measured().size();
    CostModel learnt =
        learner_->Learn(RequestFor(step, planned_with), plan, group_s);
    // The step's estimates against its measurements, before learning from them.
    const std::span<const FitSample> step_groups =
        std::span(learner_->measured()).subspan(before);
    shared[0] = RmsLogError(planned_with, step_groups);
    shared[1] = static_cast<double>(learner_->measured().size());
    const auto fields = TimingCoefficientFields(learnt);
    for (size_t k = 0; k < fields.size(); ++k) shared[2 + k] = *fields[k];
  }
  world_.Broadcast(shared, sizeof shared, 0);
  rep.group_error_rms = shared[0];
  rep.learnt_groups = static_cast<int>(shared[1]);
  const auto fields = TimingCoefficientFields(cost_);
  for (size_t k = 0; k < fields.size(); ++k) *fields[k] = shared[2 + k];
}

// Long because: plan and broadcast, compute, and the all-reduce are collectives
// that every rank runs in this order.
StepReport Trainer::Step(int step) {
  const double t0 = NowS();
  StepReport rep;
  rep.step = step;
  // ---- plan: rank 0 plans (one step ahead when async), then broadcast ----
  if (opt_.on_progress) opt_.on_progress(step);
  std::vector<int64_t> code;
  std::string failure;  // rank 0: the planner's reason when not ok
  CostModel planned_with =
      cost_;  // rank 0: the coefficients of this step's plan
  if (world_.rank() == 0) {
    Planned planned;
    try {
      if (pending_step_ == step) {
        const double w0 = NowS();
        planned = pending_.get();  // planned during the previous step
        rep.plan_visible_s = NowS() - w0;
      } else {
        if (pending_.valid()) pending_.wait();
        planned =
            PlanFor(step, cost_);  // nothing ahead (first step or sync mode)
        rep.plan_visible_s = planned.plan_s;
      }
    } catch (const std::exception& e) {
      // Never leave the other ranks waiting in the broadcast: send a failed
      // plan and the reason, every rank throws below.
      planned.plan = Plan{};
      planned.plan.status = PlanStatus::kInfeasible;
      planned.plan.message = e.what();
    }
    pending_step_ = -1;
    planned_with = planned.cost;
    rep.plan_s = planned.plan_s;
    rep.plan_hidden_s = std::max(0.0, rep.plan_s - rep.plan_visible_s);
    rep.est_ms = planned.plan.est_ms;
    if (opt_.async_planning && step + 1 < opt_.steps) {
      pending_step_ = step + 1;
      pending_ = std::async(
          std::launch::async,
          [this, s = step + 1, cost = cost_] { return PlanFor(s, cost); });
    }
    code = EncodePlan(planned.plan);
    failure = planned.plan.message;
  }
  int64_t n = static_cast<int64_t>(code.size());
  world_.Broadcast(&n, sizeof n, 0);
  code.resize(n);
  world_.Broadcast(code.data(), n * sizeof(int64_t), 0);
  double plan_info[4] = {rep.plan_s, rep.plan_visible_s, rep.plan_hidden_s,
                         rep.est_ms};
  world_.Broadcast(plan_info, sizeof plan_info, 0);
  rep.plan_s = plan_info[0];
  rep.plan_visible_s = plan_info[1];
  rep.plan_hidden_s = plan_info[2];
  rep.est_ms = plan_info[3];
  const Plan plan = DecodePlan(code);
  if (plan.status != PlanStatus::kOk) {
    int64_t len = static_cast<int64_t>(failure.size());
    world_.Broadcast(&len, sizeof len, 0);
    failure.resize(len);
    if (len > 0) world_.Broadcast(failure.data(), len, 0);
    throw CollectiveError("step " + std::to_string(step) +
                          ": planner found no feasible plan: " +
                          (failure.empty() ? "no reason given" : failure));
  }
  if (opt_.on_progress) opt_.on_progress(step);

  const std::vector<int> files = BatchFiles(corpus_, step, opt_.gbs, opt_.seed);
  const GlobalBatch batch = LoadBatch(corpus_, files, opt_.max_len);
  const std::string bad = CheckExecutablePlan(
      plan, world_.size(), static_cast<int>(files.size()), opt_.model.heads);
  if (!bad.empty())
    throw CollectiveError("step " + std::to_string(step) +
                          ": plan not executable: " + bad);
  for (const auto& mb : plan.micro_batches) {
    rep.layout += rep.layout.empty() ? "[" : " [";
    for (size_t g = 0; g < mb.groups.size(); ++g) {
      if (g) rep.layout += ',';
      rep.layout += std::to_string(mb.groups[g].degree());
      // Ulysses (all-to-all) groups are marked: "[2u,2u]".
      if (mb.groups[g].comm == CommKind::kAllToAll) rep.layout += 'u';
    }
    rep.layout += "]";
  }
  if (opt_.on_step_start) opt_.on_step_start(world_.rank(), step);

  // ---- compute, one all-reduce, optimizer ----
  ExecStats stats;
  rep.loss =
      GlobalGradients(world_, cache_, opt_.model, layout_, params_.data(),
                      batch, plan, opt_.kernels, grads_, &stats);
  if (opt_.on_progress) opt_.on_progress(step);
  if (opt_.learn) LearnFrom(step, plan, planned_with, stats.micro_batch_s, rep);
  adam_.Step(params_.data(), grads_.data());
  if (opt_.on_progress) opt_.on_progress(step);
  rep.group_setup_s = stats.group_setup_s;
  for (const auto& s : batch.sequences)
    rep.global_tokens += static_cast<int64_t>(s.size());
  rep.cache = cache_.stats();
  rep.wall_s = NowS() - t0;
  return rep;
}

}  // namespace fcp::exec
