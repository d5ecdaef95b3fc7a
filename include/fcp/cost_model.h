// The planner's cost model, exactly docs/design.md §2. Pure functions of their
// arguments: thread-safe. Times in seconds, memory in bytes, lengths in tokens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "fcp/types.h"

namespace fcp {

// The per-group aggregates the cost model needs; O(1) to extend.
struct GroupLoad {
  double sum_tokens = 0;  // Σ s_k
  double sum_attn = 0;    // Σ (1 + eta_k) s_k²
  double sum_attn_tokens =
      0;  // Σ (1 + eta_k) s_k (the v2 short-chunk term's weight)
  double sum_vision = 0;  // Σ v_k, the vision tokens
  void Add(const Sequence& s) {
    const double len = static_cast<double>(s.length_tokens);
    sum_tokens += len;
    sum_attn += (1.0 + s.eta) * len * len;
    sum_attn_tokens += (1.0 + s.eta) * len;
    sum_vision += static_cast<double>(s.vision_tokens);
  }
  void Remove(const Sequence& s) {
    const double len = static_cast<double>(s.length_tokens);
    sum_tokens -= len;
    sum_attn -= (1.0 + s.eta) * len * len;
    sum_attn_tokens -= (1.0 + s.eta) * len;
    sum_vision -= static_cast<double>(s.vision_tokens);
  }
  static GroupLoad Of(const Sequence& s) {
    GroupLoad g;
    g.Add(s);
    return g;
  }
};

// Returns an error naming the field ("cost_model.alpha1: ...") or nullopt.
std::optional<std::string> ValidateCostModel(const CostModel& cm);
// Same check; throws InputError naming the field.
void CheckCostModel(const CostModel& cm);

// Which link a group's ring runs over: bandwidth bw_intra_node and step
// latency gamma_intra when every rank of the group is on one node, else the
// inter-node figures.
enum class Link { kIntraNode, kInterNode };

// The parts of T(G, d) (s), docs/design.md §2: attention A, compute Tcp = A +
// Lin + beta1 + (d - 1)·gamma_serial, communication Tcm + X (0 for d = 1) with
// X = alpha3_home·Σs/d/v the transfer after the last attention step, total
// T = Tcp + Tcm + X - min(A·(d - e)/d, Tcm) with e = ring_tail_steps. This is
// the one place the formula lives; everything else calls it.
struct GroupTimeParts {
  double attn_s = 0;
  double compute_s = 0;
  double comm_s = 0;
  double total_s = 0;
};
// Defined inline (below): the planner evaluates it hundreds of thousands of
// times per plan.
inline GroupTimeParts GroupTimePartsS(const CostModel& cm,
                                      const GroupLoad& load, int degree,
                                      Link link);

// The linear term Lin on each of `degree` ranks (s): alpha2·Σs/d +
// alpha2_vision·Σv/d, every layer but attention, and the vision encoder on
// the vision tokens.
inline double LinearS(const CostModel& cm, const GroupLoad& load, double d) {
  return cm.alpha2 * load.sum_tokens / d +
         cm.alpha2_vision * load.sum_vision / d;
}

// The work term: a load's compute on each of `degree` ranks, fixed costs
// (beta1, gamma_serial) left out (s): alpha1·(Σ(1+eta)s²/d + h·Σ(1+eta)s) +
// Lin. Times `degree` it is the load's rank-seconds, smallest at d = 1, so
// WorkS(cm, load, 1) summed over a batch and divided by N bounds any plan's
// makespan from below. The planner's one copy of the work term.
inline double WorkS(const CostModel& cm, const GroupLoad& load,
                    int degree = 1) {
  const double d = degree;
  return cm.alpha1 * (load.sum_attn / d +
                      cm.attn_overhead_tokens * load.sum_attn_tokens) +
         LinearS(cm, load, d);
}

// Whether an all-to-all (Ulysses) group of `degree` ranks runs: its degree
// divides the query heads, so every rank holds the same number of heads. No
// runtime implements padded Ulysses, so every planner skips, and the plan
// validator and `fcp simulate --plan` refuse, the other degrees.
inline bool AllToAllDegreeRuns(const ModelShape& shape, int degree) {
  return degree >= 1 && shape.q_heads > 0 && shape.q_heads % degree == 0;
}

// T(G, d) over `link` (s). degree >= 1.
inline double GroupTimeS(const CostModel& cm, const GroupLoad& load, int degree,
                         Link link);

// True if every rank of `ranks` is on one node (node of r = r / R).
bool OnOneNode(const Cluster& cluster, std::span<const int> ranks);
// Same for the contiguous range [first, first + degree).
bool RangeOnOneNode(const Cluster& cluster, int first, int degree);

// T(G, d) for a group placed on `ranks` (d = ranks.size()); picks the intra or
// inter-node link from the placement (s).
double GroupTimeOnRanksS(const CostModel& cm, const Cluster& cluster,
                         const GroupLoad& load, std::span<const int> ranks);

// Best-case T(G, d) regardless of placement: the faster link when d <= R could
// fit in one node, else inter (s). Used for lower bounds and planning
// estimates.
inline double GroupTimeBestS(const CostModel& cm, const Cluster& cluster,
                             const GroupLoad& load, int degree);

// mem(G, d) per rank (bytes).
double GroupMemBytes(const CostModel& cm, const GroupLoad& load, int degree);

// d_min(G): the smallest d >= 1 with mem(G, d) <= mem_capacity, i.e.
// ceil(mem_per_token Σs / (mem_capacity - mem_static)), at least 1, evaluated
// in the same floating-point form as GroupMemBytes. O(log d) whatever the
// coefficients (a closed form, corrected by a bounded search for rounding).
// Saturates at INT64_MAX/4 for absurd inputs instead of overflowing.
int64_t MinDegree(const CostModel& cm, const GroupLoad& load);

// Per-rank bandwidth of a Ulysses all-to-all (bytes/s) for a group placed on
// `ranks` (node of r = r / R). Every rank sends the same bytes to each of its
// d - 1 peers, and the intra- and inter-node links work in parallel, so a
// rank with `same` peers on its node takes max(same / bw_intra_node,
// (d - 1 - same) / bw_inter_node) per byte sent to each peer; the group waits
// for its slowest rank. Bandwidth is (d - 1) / that time: a group over
// several nodes beats the inter-node link alone (16 ranks on two 8-rank
// nodes: 15/8 of it). One rank: bw_intra_node.
double AllToAllBandwidthOnRanks(const CostModel& cm, const Cluster& cluster,
                                std::span<const int> ranks);
// The same for the contiguous range [first, first + degree).
double AllToAllBandwidthOnRange(const CostModel& cm, const Cluster& cluster,
                                int first, int degree);
// An upper bound over every placement of `degree` ranks (for lower bounds on
// time): the best bottleneck with up to min(degree, R) - 1 same-node peers.
double AllToAllBandwidthBound(const CostModel& cm, const Cluster& cluster,
                              int degree);

// Ulysses all-to-all group time (DeepSpeed/FlexSP baselines); the derivation is
// documented in src/cost/alltoall.cc. `shape` supplies head counts;
// `bw_bytes_per_s` is the group's AllToAllBandwidth*.
double AllToAllGroupTimeS(const CostModel& cm, const ModelShape& shape,
                          const GroupLoad& load, int degree,
                          double bw_bytes_per_s);

// The same time in parts: attention, compute (attention, linear, beta1), the
// all-to-all's transfer (0 for d = 1) and their sum (the transfer is a data
// dependency of attention, so nothing overlaps).
GroupTimeParts AllToAllGroupTimePartsS(const CostModel& cm,
                                       const ModelShape& shape,
                                       const GroupLoad& load, int degree,
                                       double bw_bytes_per_s);

// A Ulysses group's head factors (src/cost/alltoall.cc): `pad` >= 1 scales
// attention when d does not divide the query heads; `rho` is the all-to-all
// volume per token relative to alpha3.
struct AllToAllFactors {
  double pad = 1;
  double rho = 3.75;
};
AllToAllFactors AllToAllFactorsFor(const ModelShape& shape, int degree);

// AllToAllGroupTimePartsS with the degree's factors given (`factors` =
// AllToAllFactorsFor(shape, degree)), for callers that price many loads at
// one degree (the planner's grouping stages).
GroupTimeParts AllToAllGroupTimePartsS(const CostModel& cm,
                                       const AllToAllFactors& factors,
                                       const GroupLoad& load, int degree,
                                       double bw_bytes_per_s);

// ---- inline definitions (the formula, docs/design.md §2) ----

inline GroupTimeParts GroupTimePartsS(const CostModel& cm,
                                      const GroupLoad& load, int degree,
                                      Link link) {
  const double d = degree;
  const bool intra = link == Link::kIntraNode;
  const double bw = intra ? cm.bw_intra_node : cm.bw_inter_node;
  const double gamma = intra ? cm.gamma_intra : cm.gamma_inter;
  GroupTimeParts p;
  p.attn_s = cm.alpha1 * (load.sum_attn / d +
                          cm.attn_overhead_tokens * load.sum_attn_tokens);
  // A ring step's kernel launches are on the critical path (not hidden).
  p.compute_s =
      p.attn_s + LinearS(cm, load, d) + cm.beta1 + (d - 1) * cm.gamma_serial;
  // The backward's last transfer (each rank's dKV share going home) starts
  // after its last attention step: nothing hides it.
  const double home_s =
      degree == 1 ? 0.0 : cm.alpha3_home * load.sum_tokens / d / bw;
  p.comm_s = degree == 1 ? 0.0
                         : cm.alpha3 * load.sum_tokens * (d - 1) / d / bw +
                               cm.beta2 + (d - 1) * gamma + home_s;
  // d - 1 transfers overlap d - 1 of the d attention steps; the last
  // ring_tail_steps of them have nothing left to receive.
  const double hideable_s = p.attn_s * (d - cm.ring_tail_steps) / d;
  p.total_s = p.compute_s + p.comm_s - std::min(hideable_s, p.comm_s - home_s);
  return p;
}

inline double GroupTimeS(const CostModel& cm, const GroupLoad& load, int degree,
                         Link link) {
  return GroupTimePartsS(cm, load, degree, link).total_s;
}

inline double GroupTimeBestS(const CostModel& cm, const Cluster& cluster,
                             const GroupLoad& load, int degree) {
  if (degree > cluster.ranks_per_node)
    return GroupTimeS(cm, load, degree, Link::kInterNode);
  // T is monotone in the bandwidth's inverse and in gamma: a link that is no
  // slower on both counts is the best case without computing the other.
  if (cm.bw_intra_node >= cm.bw_inter_node &&
      cm.gamma_intra <= cm.gamma_inter) {
    return GroupTimeS(cm, load, degree, Link::kIntraNode);
  }
  if (cm.bw_inter_node >= cm.bw_intra_node &&
      cm.gamma_inter <= cm.gamma_intra) {
    return GroupTimeS(cm, load, degree, Link::kInterNode);
  }
  return std::min(GroupTimeS(cm, load, degree, Link::kInterNode),
                  GroupTimeS(cm, load, degree, Link::kIntraNode));
}

}  // namespace fcp
