// Scoring one micro-batch's layouts against the rest of a plan in O(N) each
// (fcp's micro-batch shifts, issue 30). Thread-safety: one object per caller.
#pragma once

#include <cstddef>
#include <vector>

#include "fcp/scheduler.h"

namespace fcp::planner {

// Scores the layouts of one micro-batch at a time against the rest of the
// plan: its makespan (ListScheduleMs) or, given the gradient sync, its step
// (StepMs). The list schedule is linear in (max, +): read backwards, a rank's
// tail once micro-batch m has run is its longest chain of group times
// through micro-batches m + 1 ... C - 1, ending in its step terms (StepMs:
// the all-gather exposed behind its first group and the reduce-scatter
// behind its last; 0 for the makespan). The score is the max over ranks of
// the free time after m plus the tail; a rank with no group after m ends
// there, its terms read from m's layout. Micro-batches are laid out in order
// (Commit, from micro-batch 0); those after m keep their layouts meanwhile.
// Reads only the groups' ranks and est_ms.
class LayoutScorer {
 public:
  // `sync` null: the makespan. `micro_batches` must outlive the scorer.
  LayoutScorer(int num_ranks, const GradientSync* sync,
               const std::vector<MicroBatchPlan>& micro_batches);
  // Whether Score gives micro-batch m's score: with a sync, every rank with
  // a group after m has had its first group (the all-gather term in its tail
  // is known). Always true for the makespan.
  bool CanScore(size_t m) const;
  // The score (ms) of the plan with micro-batch m (the next one to commit)
  // laid out as `mb` is now; equal to the plan's ListScheduleMs or StepMs up
  // to rounding.
  double Score(size_t m, const MicroBatchPlan& mb);
  // The next micro-batch keeps its layout `mb`.
  void Commit(const MicroBatchPlan& mb);

 private:
  void ComputeTails(size_t from);
  double AllGatherMs(double first_ms) const;
  double ReduceScatterMs(double last_ms) const;

  size_t n_;
  const GradientSync* sync_;
  const std::vector<MicroBatchPlan>& micro_batches_;
  std::vector<int> last_use_;  // the last micro-batch using each rank, or -1
  // After the committed micro-batches: free times, first and last group
  // times (-1 and 0 while none).
  std::vector<double> free_at_, first_ms_, last_ms_;
  std::vector<double> tails_;  // [m · N + rank]
  std::vector<double> scratch_, cover_ms_;
};

}  // namespace fcp::planner
