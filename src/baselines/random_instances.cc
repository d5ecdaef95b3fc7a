#include "baselines/random_instances.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "fcp/cost_model.h"

namespace fcp::baselines {
namespace {

double LogUniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
  return std::exp(u(rng));
}

}  // namespace

CostModel RandomCostModel(std::mt19937_64& rng) {
  CostModel cm;
  // Base magnitudes: qwen3-8b on a 376 TFLOPS rank (see
  // src/presets/presets.cc).
  cm.alpha1 = 5.5e-9 * LogUniform(rng, 0.2, 5.0);
  cm.alpha2 = 2.6e-4 * LogUniform(rng, 0.2, 5.0);
  cm.beta1 = LogUniform(rng, 1e-5, 2e-2);
  cm.alpha3 = 5.9e5 * LogUniform(rng, 0.1, 100.0);
  cm.beta2 = LogUniform(rng, 1e-6, 5e-3);
  cm.bw_intra_node = 196e9 * LogUniform(rng, 0.5, 2.0);
  cm.bw_inter_node = cm.bw_intra_node * LogUniform(rng, 0.05, 1.0);
  cm.mem_static = 20e9;
  cm.mem_capacity = 64e9;
  const double tokens_per_rank = LogUniform(rng, 2048, 65536);
  cm.mem_per_token = (cm.mem_capacity - cm.mem_static) / tokens_per_rank;
  return cm;
}

// Long because: one draw per request field in a fixed order, which the seeded
// test instances depend on.
PlanRequest RandomRequest(std::mt19937_64& rng,
                          const RandomInstanceOptions& options) {
  PlanRequest req;
  std::uniform_int_distribution<int> n_dist(options.min_ranks,
                                            options.max_ranks);
  req.cluster.num_ranks = n_dist(rng);
  const int per_node_choices[] = {1, 2, 3, 4, 4, 6, 8, 8, 16};
  std::uniform_int_distribution<int> r_pick(0, 8);
  req.cluster.ranks_per_node = per_node_choices[r_pick(rng)];
  req.cost = RandomCostModel(rng);
  if (options.with_model) {
    ModelShape m;
    m.name = "random";
    const int kv_choices[] = {1, 2, 4, 8};
    const int ratio_choices[] = {1, 2, 3, 4, 6, 8};
    std::uniform_int_distribution<int> p4(0, 3), p6(0, 5);
    m.kv_heads = kv_choices[p4(rng)];
    m.q_heads = m.kv_heads * ratio_choices[p6(rng)];
    m.head_dim = 128;
    m.hidden = m.q_heads * m.head_dim;
    m.layers = 32;
    req.model = m;
  }
  std::uniform_int_distribution<int> k_dist(options.min_sequences,
                                            options.max_sequences);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const int num_sequences = k_dist(rng);
  const double headroom = req.cost.mem_capacity - req.cost.mem_static;
  for (int attempt = 0;; ++attempt) {
    req.sequences.clear();
    // Shrink the length range on repeated failures so the loop terminates.
    const double max_len =
        std::max<double>(static_cast<double>(options.min_length_tokens),
                         static_cast<double>(options.max_length_tokens) /
                             std::pow(1.5, attempt / 4));
    for (int k = 0; k < num_sequences; ++k) {
      Sequence s;
      s.length_tokens = std::max<int64_t>(
          1,
          std::llround(LogUniform(
              rng, static_cast<double>(options.min_length_tokens),
              std::max(max_len,
                       static_cast<double>(options.min_length_tokens) + 1))));
      if (u01(rng) < options.mixed_mask_probability) s.eta = u01(rng);
      req.sequences.push_back(s);
    }
    if (!options.one_micro_batch_feasible) break;
    if (attempt > 200) {
      // Give up on the length mix: make the whole batch fit on one rank.
      double total = 0;
      for (const Sequence& s : req.sequences)
        total += static_cast<double>(s.length_tokens);
      req.cost.mem_per_token = headroom / (total + 1.0);
    }
    // Sufficient condition for one feasible micro-batch: every sequence that
    // needs several ranks gets its own group of d_min ranks; the others are
    // packed first-fit-decreasing onto single ranks.
    const double rank_tokens = headroom / req.cost.mem_per_token;
    std::vector<double> short_lengths;
    int64_t ranks_needed = 0;
    for (const Sequence& s : req.sequences) {
      const int64_t dmin = MinDegree(req.cost, GroupLoad::Of(s));
      if (dmin > 1) {
        ranks_needed += dmin;
      } else {
        short_lengths.push_back(static_cast<double>(s.length_tokens));
      }
    }
    std::sort(short_lengths.rbegin(), short_lengths.rend());
    std::vector<double> bins;
    for (double len : short_lengths) {
      bool placed = false;
      for (double& used : bins) {
        if (used + len <= rank_tokens * (1 - 1e-12)) {
          used += len;
          placed = true;
          break;
        }
      }
      if (!placed) bins.push_back(len);
    }
    ranks_needed += static_cast<int64_t>(bins.size());
    if (ranks_needed <= req.cluster.num_ranks) break;
  }
  if (options.vision_probability > 0) {
    // Up to twice alpha2 (qwen3-vl's encoder is about a quarter of it).
    req.cost.alpha2_vision = req.cost.alpha2 * LogUniform(rng, 0.05, 2.0);
    for (Sequence& s : req.sequences) {
      if (u01(rng) >= options.vision_probability) continue;
      std::uniform_int_distribution<int64_t> v(0, s.length_tokens);
      s.vision_tokens = v(rng);
    }
  }
  return req;
}

}  // namespace fcp::baselines
