// The dual approximation's pricing of a group at a degree (refine.h), and a
// lower bound on how much adding a load lengthens it.
// Thread-safety: an instance caches per degree; one per thread.
#pragma once

#include <algorithm>
#include <vector>

#include "fcp/cost_model.h"
#include "fcp/scheduler.h"
#include "planner/realize.h"

namespace fcp::planner {

// A group's best-case T(G, d) as the allocator prices it: the ring or, with a
// model shape, an all-to-all where the degree allows one (realize.h). The
// grouping stages priced rings only, so a long sequence that an all-to-all
// group runs far faster across nodes was given a ring's degree (issue 32).
// What depends on the degree alone (whether an all-to-all runs, and at which
// bandwidths) is kept per degree: the dual approximation prices millions of
// (group, degree) pairs at 8,192 sequences.
class BestTimer {
 public:
  explicit BestTimer(const PlanRequest& request,
                     AllToAllPricing pricing = AllToAllPricing::kWorstPlacement)
      : cm_(request.cost),
        cluster_(request.cluster),
        shape_(ShapeOf(request)),
        pricing_(pricing) {
    floors_.resize(request.cluster.num_ranks + 1);
    for (int d = 1; d <= request.cluster.num_ranks; ++d) {
      Info(d);
      floors_[d] = MakeFloor(d);
    }
  }

  double operator()(const GroupLoad& load, int degree) {
    const double ring = GroupTimeBestS(cm_, cluster_, load, degree);
    if (!shape_ || degree <= 1) return ring;
    const Degree& info = static_cast<size_t>(degree) < degrees_.size()
                             ? degrees_[degree]  // filled up to N up front
                             : Info(degree);
    if (info.a2a_bw == 0) return ring;
    return std::min(ring, AllToAllGroupTimePartsS(cm_, info.factors, load,
                                                  degree, info.a2a_bw)
                              .total_s);
  }

  // A lower bound on how much adding `add` to any load lengthens its
  // operator() at `degree` (1 <= degree <= N; s): T(L + add, d) >= T(L, d) +
  // GrowthFloor(add, d) for every load L, up to rounding, so that a group whose
  // time plus this exceeds the limit is passed over without pricing it. The
  // ring's T is max(Tcp, Tcp + Tcm - A·(d - e)/d) (cost_model.h), each branch
  // affine in the load, so it grows by at least the smaller branch's growth,
  // over the faster link when both may apply; an all-to-all takes at least its
  // compute (head padding >= 1, traffic >= 0); the minimum of the two grows by
  // at least the smaller of their growths.
  double GrowthFloor(const GroupLoad& add, int degree) const {
    const Floor& f = floors_[degree];
    const double lin_vision = f.lin_vision * add.sum_vision;
    const double lin = f.lin * add.sum_tokens + lin_vision;
    const double attn =
        f.attn_sq * add.sum_attn + f.attn_lin * add.sum_attn_tokens;
    const double ring =
        lin + f.ring_home * add.sum_tokens +
        std::min(attn, attn * f.tail + f.ring_comm * add.sum_tokens);
    if (!f.a2a) return ring;
    return std::min(ring, f.attn_sq * (add.sum_attn + cm_.attn_overhead_tokens *
                                                          add.sum_attn_tokens) +
                              f.a2a_tokens * add.sum_tokens + lin_vision);
  }

 private:
  // The bandwidth an all-to-all group of this degree is priced at (0: ring
  // only). A node-aligned degree at its bandwidth on whole nodes (where an
  // aligned allocation places it, realize.h); any other as the allocator
  // prices it (BestCaseRingOrAllToAll: the faster of the inter-node link and,
  // when the group may fit in one node, the intra-node one; the time is
  // monotone in the bandwidth, rounding included, so the fastest alone is
  // priced).
  struct Degree {
    bool known = false;
    double a2a_bw = 0;
    AllToAllFactors factors{};  // AllToAllFactorsFor(*shape_, degree)
  };
  const Degree& Info(int degree) {
    if (static_cast<size_t>(degree) >= degrees_.size())
      degrees_.resize(degree + 1);
    Degree& info = degrees_[degree];
    if (info.known) return info;
    info.known = true;
    if (!AllToAllAllowed(shape_, degree)) return info;
    if (AlignedDegree(cluster_, degree) ||
        pricing_ == AllToAllPricing::kPacked) {
      info.a2a_bw = AllToAllBandwidthOnRange(cm_, cluster_, 0, degree);
    } else {
      info.a2a_bw = degree <= cluster_.ranks_per_node
                        ? std::max(cm_.bw_inter_node, cm_.bw_intra_node)
                        : cm_.bw_inter_node;
    }
    info.factors = AllToAllFactorsFor(*shape_, degree);
    return info;
  }

  // GrowthFloor's coefficients at one degree d (per unit of the load's sums).
  struct Floor {
    double lin = 0;         // alpha2 / d
    double lin_vision = 0;  // alpha2_vision / d
    double attn_sq = 0;     // alpha1 / d
    double attn_lin = 0;    // alpha1 · h
    double tail = 0;        // e / d
    double ring_comm = 0;   // alpha3 (d - 1) / d / (the faster link)
    double ring_home = 0;   // alpha3_home / d / (the faster link): never hidden
    bool a2a = false;
    // alpha2 / d + the all-to-all's traffic with no head padding and K/V
    // heads held 1/d each (AllToAllGroupTimeS: both only add), at the best
    // bandwidth the degree is priced at.
    double a2a_tokens = 0;
  };
  Floor MakeFloor(int degree) {
    const double d = degree;
    Floor f;
    f.lin = cm_.alpha2 / d;
    f.lin_vision = cm_.alpha2_vision / d;
    f.attn_sq = cm_.alpha1 / d;
    f.attn_lin = cm_.alpha1 * cm_.attn_overhead_tokens;
    f.tail = cm_.ring_tail_steps / d;
    const double bw = degree <= cluster_.ranks_per_node
                          ? std::max(cm_.bw_intra_node, cm_.bw_inter_node)
                          : cm_.bw_inter_node;
    f.ring_comm = degree == 1 ? 0.0 : cm_.alpha3 * (d - 1) / d / bw;
    f.ring_home = degree == 1 ? 0.0 : cm_.alpha3_home / d / bw;
    if (shape_ && degree > 1 && Info(degree).a2a_bw > 0) {
      const double rho =
          shape_->q_heads > 0 && shape_->kv_heads > 0
              ? 0.75 * (shape_->q_heads + shape_->kv_heads) / shape_->kv_heads
              : 3.75;
      f.a2a = true;
      f.a2a_tokens =
          f.lin + rho * cm_.alpha3 * (d - 1) / d / d / Info(degree).a2a_bw;
    }
    return f;
  }

  const CostModel& cm_;
  const Cluster& cluster_;
  const ModelShape* shape_;
  AllToAllPricing pricing_;
  std::vector<Degree> degrees_;
  std::vector<Floor> floors_;  // by degree, 0..N
};

}  // namespace fcp::planner
