#include "exec/executor.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "exec/clock.h"
#include "fcp/check.h"

namespace fcp::exec {

std::vector<int64_t> GlobalBatch::lengths() const {
  std::vector<int64_t> out;
  for (const auto& s : sequences) out.push_back(static_cast<int64_t>(s.size()));
  return out;
}

int64_t GlobalBatch::num_targets() const {
  int64_t n = 0;
  for (const auto& s : sequences) n += static_cast<int64_t>(s.size()) - 1;
  return n;
}

std::string CheckExecutablePlan(const Plan& plan, int num_ranks,
                                int num_sequences, int q_heads) {
  if (plan.status != PlanStatus::kOk) return "status: plan is not ok";
  std::vector<int> seen(num_sequences, 0);
  for (size_t m = 0; m < plan.micro_batches.size(); ++m) {
    std::set<int> used;
    const auto& mb = plan.micro_batches[m];
    for (size_t g = 0; g < mb.groups.size(); ++g) {
      const std::string field = "micro_batches[" + std::to_string(m) +
                                "].groups[" + std::to_string(g) + "]";
      const GroupPlan& gp = mb.groups[g];
      if (gp.ranks.empty()) return field + ".ranks: empty";
      if (gp.sequences.empty()) return field + ".sequences: empty";
      if (q_heads > 0 && gp.comm == CommKind::kAllToAll &&
          q_heads % gp.degree() != 0)
        return field + ".comm: an all-to-all group of degree " +
               std::to_string(gp.degree()) + " does not divide " +
               std::to_string(q_heads) + " query heads";
      for (int r : gp.ranks) {
        if (r < 0 || r >= num_ranks)
          return field + ".ranks: rank " + std::to_string(r) + " out of range";
        if (!used.insert(r).second)
          return field + ".ranks: rank " + std::to_string(r) +
                 " used twice in one micro-batch";
      }
      for (int s : gp.sequences) {
        if (s < 0 || s >= num_sequences)
          return field + ".sequences: index " + std::to_string(s) +
                 " out of range";
        seen[s]++;
      }
    }
  }
  for (int s = 0; s < num_sequences; ++s)
    if (seen[s] != 1)
      return "sequences[" + std::to_string(s) + "]: scheduled " +
             std::to_string(seen[s]) + " times";
  return "";
}

Plan RandomValidPlan(int num_sequences, int num_ranks, uint64_t seed,
                     int max_micro_batches) {
  FCP_CHECK(num_sequences >= 1 && num_ranks >= 1 && max_micro_batches >= 1);
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) {  // inclusive
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  Plan plan;
  plan.strategy = "random";
  plan.num_ranks = num_ranks;
  const int num_mb = uniform(1, std::min(max_micro_batches, num_sequences));
  std::vector<std::vector<int>> mb_seqs(num_mb);
  for (int m = 0; m < num_mb; ++m) mb_seqs[m].push_back(m);  // none empty
  for (int s = num_mb; s < num_sequences; ++s)
    mb_seqs[uniform(0, num_mb - 1)].push_back(s);
  for (int m = 0; m < num_mb; ++m) {
    std::vector<int> ranks(num_ranks);
    std::iota(ranks.begin(), ranks.end(), 0);
    std::shuffle(ranks.begin(), ranks.end(), rng);
    const int used = uniform(1, num_ranks);  // the rest idle
    std::vector<std::vector<int>> groups;
    for (int i = 0; i < used;) {
      const int d = uniform(1, used - i);
      groups.emplace_back(ranks.begin() + i, ranks.begin() + i + d);
      i += d;
    }
    const int num_groups = std::min(static_cast<int>(groups.size()),
                                    static_cast<int>(mb_seqs[m].size()));
    groups.resize(num_groups);
    MicroBatchPlan mbp;
    for (auto& g : groups) {
      GroupPlan gp;
      gp.ranks = g;
      mbp.groups.push_back(gp);
    }
    std::shuffle(mb_seqs[m].begin(), mb_seqs[m].end(), rng);
    for (size_t i = 0; i < mb_seqs[m].size(); ++i) {
      const int g = i < static_cast<size_t>(num_groups)
                        ? static_cast<int>(i)
                        : uniform(0, num_groups - 1);
      mbp.groups[g].sequences.push_back(mb_seqs[m][i]);
    }
    plan.micro_batches.push_back(std::move(mbp));
  }
  return plan;
}

Plan SingleRankPlan(int num_sequences) {
  Plan plan;
  plan.strategy = "single";
  plan.num_ranks = 1;
  GroupPlan g;
  g.ranks = {0};
  g.sequences.resize(num_sequences);
  std::iota(g.sequences.begin(), g.sequences.end(), 0);
  plan.micro_batches.push_back(MicroBatchPlan{{g}, 0});
  return plan;
}

std::vector<int64_t> EncodePlan(const Plan& plan) {
  std::vector<int64_t> code;
  code.push_back(plan.status == PlanStatus::kOk ? 0 : 1);
  code.push_back(plan.num_ranks);
  code.push_back(static_cast<int64_t>(plan.micro_batches.size()));
  for (const auto& mb : plan.micro_batches) {
    code.push_back(static_cast<int64_t>(mb.groups.size()));
    for (const auto& g : mb.groups) {
      code.push_back(g.comm == CommKind::kRing ? 0 : 1);
      code.push_back(static_cast<int64_t>(g.ranks.size()));
      for (int r : g.ranks) code.push_back(r);
      code.push_back(static_cast<int64_t>(g.sequences.size()));
      for (int s : g.sequences) code.push_back(s);
    }
  }
  return code;
}

Plan DecodePlan(const std::vector<int64_t>& code) {
  size_t i = 0;
  auto next = [&]() {
    FCP_CHECK(i < code.size());
    return code[i++];
  };
  Plan plan;
  plan.status = next() == 0 ? PlanStatus::kOk : PlanStatus::kInfeasible;
  plan.num_ranks = static_cast<int>(next());
  const int64_t num_mb = next();
  for (int64_t m = 0; m < num_mb; ++m) {
    MicroBatchPlan mb;
    const int64_t num_groups = next();
    for (int64_t g = 0; g < num_groups; ++g) {
      GroupPlan gp;
      gp.comm = next() == 0 ? CommKind::kRing : CommKind::kAllToAll;
      const int64_t nr = next();
      for (int64_t k = 0; k < nr; ++k)
        gp.ranks.push_back(static_cast<int>(next()));
      const int64_t ns = next();
      for (int64_t k = 0; k < ns; ++k)
        gp.sequences.push_back(static_cast<int>(next()));
      mb.groups.push_back(std::move(gp));
    }
    plan.micro_batches.push_back(std::move(mb));
  }
  FCP_CHECK(i == code.size());
  return plan;
}

ExecStats AccumulateGradients(Communicator& world, CommCache& cache,
                              const ModelConfig& cfg, const ParamLayout& layout,
                              const float* params, const GlobalBatch& batch,
                              const Plan& plan, AttentionKernels kernels,
                              float* grads) {
  ExecStats stats;
  const std::vector<int64_t> lengths = batch.lengths();
  const float loss_scale = 1.0f / static_cast<float>(batch.num_targets());
  for (const auto& mb : plan.micro_batches) {
    std::vector<std::vector<int>> rank_sets;
    for (const auto& g : mb.groups) rank_sets.push_back(g.ranks);
    const double t0 = NowS();
    Communicator* group = cache.Acquire(rank_sets);
    const double t1 = NowS();
    stats.group_setup_s += t1 - t0;
    stats.micro_batch_s.push_back(0.0);
    if (!group) continue;  // idle in this micro-batch
    const GroupPlan* mine = nullptr;
    for (const auto& g : mb.groups)
      if (std::find(g.ranks.begin(), g.ranks.end(), world.rank()) !=
          g.ranks.end())
        mine = &g;
    FCP_CHECK(mine != nullptr);
    const std::vector<ShardLayout> layouts =
        ZigzagLayouts(lengths, batch.eta, mine->sequences, mine->degree());
    const ShardBatch shard =
        MakeShardBatch(layouts[group->rank()], batch.sequences);
    RingAttentionArgs attn;
    attn.comm = group->size() > 1 ? group : nullptr;
    attn.layouts = &layouts;
    attn.kernels = kernels;
    attn.comm_kind = mine->comm;
    stats.loss_sum +=
        ForwardBackward(cfg, layout, params, shard, attn, loss_scale, grads);
    stats.num_tokens += static_cast<int64_t>(shard.tokens.size());
    stats.micro_batch_s.back() = NowS() - t1;
    stats.compute_s += stats.micro_batch_s.back();
  }
  return stats;
}

double GlobalGradients(Communicator& world, CommCache& cache,
                       const ModelConfig& cfg, const ParamLayout& layout,
                       const float* params, const GlobalBatch& batch,
                       const Plan& plan, AttentionKernels kernels,
                       std::vector<float>& grads, ExecStats* stats) {
  // One buffer: gradients, then the loss sum, reduced in one call.
  grads.assign(layout.total + 1, 0.0f);
  ExecStats s = AccumulateGradients(world, cache, cfg, layout, params, batch,
                                    plan, kernels, grads.data());
  grads[layout.total] = static_cast<float>(s.loss_sum);
  world.AllReduceSum(grads.data(), grads.size());
  const double loss = grads[layout.total] / batch.num_targets();
  grads.resize(layout.total);
  if (stats) *stats = s;
  return loss;
}

double ReferenceGradients(const ModelConfig& cfg, const ParamLayout& layout,
                          const float* params, const GlobalBatch& batch,
                          std::vector<float>& grads) {
  grads.assign(layout.total, 0.0f);
  const std::vector<int64_t> lengths = batch.lengths();
  const float loss_scale = 1.0f / static_cast<float>(batch.num_targets());
  double loss = 0;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const std::vector<ShardLayout> layouts =
        ZigzagLayouts(lengths, batch.eta, {static_cast<int>(s)}, 1);
    const ShardBatch shard = MakeShardBatch(layouts[0], batch.sequences);
    RingAttentionArgs attn;
    attn.layouts = &layouts;
    attn.kernels = AttentionKernels::kReference;
    loss += ForwardBackward(cfg, layout, params, shard, attn, loss_scale,
                            grads.data());
  }
  return loss / batch.num_targets();
}

}  // namespace fcp::exec
