// Reference heuristics (issue 32): three deliberately simple strategies that
// the fcp planner must not fall behind in its own cost model. They are NOT the
// fcp planner and the planner core does not know them; they exist as a
// yardstick for its search (docs/planner/reference-heuristics.md).
//
// All three build "lanes": a fixed set of CP groups on disjoint contiguous
// ranks that persist over the whole global batch. Each lane runs its
// sequences back to back in as many micro-batches as its memory needs, so a
// rank is never idle waiting for another lane (the plan estimate is a list
// schedule, docs/design.md §2). A lane of d > 1 runs all-to-all instead of
// ring when the cost model prices it faster and d divides the query heads.
//
// Each has one setting, tuned in hindsight on the batch itself: every value
// is planned and the best by the step estimate (StepMs with the request's
// grad_sync, else the plan estimate) is kept. The settings:
//   ref-share  — a long sequence's lane degree is k · N · (its share of the
//                batch's work); the rest LPT onto the lane finishing first.
//                Setting: k.
//   ref-bisect — bisect on a target makespan τ: heaviest first, each
//                sequence joins the lane with the least slack that still meets
//                τ, or opens the smallest lane that does. Setting: the lane
//                degree granularity g (degrees are 1 or multiples of g).
//   ref-grow   — start from single ranks (d_min where memory needs more);
//                repeatedly give the bottleneck lane `step` more ranks (or its
//                heaviest sequence a lane of its own) while ranks remain;
//                the best lane estimate seen wins. Setting: step.
// Thread-safety: stateless.
#pragma once

#include "fcp/scheduler.h"

namespace fcp::baselines {

class RefShareStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "ref-share"; }
  std::string_view description() const override {
    return "reference heuristic (not fcp): lane degree from each long "
           "sequence's work share";
  }
  Plan Solve(const PlanRequest& request,
             const PlanOptions& options) const override;
};

class RefBisectStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "ref-bisect"; }
  std::string_view description() const override {
    return "reference heuristic (not fcp): bisect a target makespan, fill "
           "lanes to it";
  }
  Plan Solve(const PlanRequest& request,
             const PlanOptions& options) const override;
};

class RefGrowStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "ref-grow"; }
  std::string_view description() const override {
    return "reference heuristic (not fcp): grow the bottleneck lane until work "
           "is even";
  }
  Plan Solve(const PlanRequest& request,
             const PlanOptions& options) const override;
};

}  // namespace fcp::baselines
