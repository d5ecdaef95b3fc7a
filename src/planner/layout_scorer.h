// Scoring one micro-batch's layouts against the rest of a plan in O(N) each
// (fcp's micro-batch shifts, issue 30). Thread-safety: one object per caller.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "fcp/scheduler.h"

namespace fcp::planner {

// Scores the layouts of one micro-batch at a time against the rest of the
// plan: its makespan (ListScheduleMs) or, given the gradient sync, its step
// (StepMs); under noise, the mean of either over the noise's draws
// (ExpectedStepMs). The list schedule is linear in (max, +): read backwards,
// a rank's tail once micro-batch m has run is its longest chain of group
// times through micro-batches m + 1 ... C - 1, ending in its step terms
// (StepMs: the all-gather exposed behind its first group and the
// reduce-scatter behind its last; 0 for the makespan). The score is the max
// over ranks of the free time after m plus the tail; a rank with no group
// after m ends there, its terms read from m's layout. Under noise each draw
// has its own schedule and tails. Micro-batches are laid out in order
// (Commit, from micro-batch 0); those after m keep their layouts meanwhile.
// With communicator costs (NewCommunicatorDelaysMs) a layout whose new rank
// sets change which later groups create a communicator is not scored (the
// tails assume the later delays of the layout as planned).
// Reads only the groups' ranks and est_ms. The tails are kept at every
// ~sqrt(C)-th micro-batch and rebuilt a block at a time: O(S·N·sqrt(C))
// memory for S draws, O(S·N·C) time in all, once more for each kept layout
// that changes later delays.
class LayoutScorer {
 public:
  // `sync` null: the makespan. `noise` null or of sigma 0: no draws. `held`
  // null: no communicator costs; else the held rank sets (sorted) and what
  // creating another costs (s), as NewCommunicatorDelaysMs takes them.
  // `micro_batches`, `noise` and `held` must outlive the scorer.
  LayoutScorer(int num_ranks, const GradientSync* sync, GroupTimeNoise* noise,
               const std::set<std::vector<int>>* held, double create_s,
               const std::vector<MicroBatchPlan>& micro_batches);
  // Whether Score gives micro-batch m's score: with a sync, every rank with
  // a group after m has had its first group (the all-gather term in its tail
  // is known). Always true for the makespan.
  bool CanScore(size_t m) const;
  // The score (ms) of the plan with micro-batch m (the next one to commit)
  // laid out as `mb` is now; equal to the whole plan's ListScheduleMs,
  // StepMs or ExpectedStepMs up to rounding. m never decreases. nullopt when
  // the layout changes which later groups create a communicator.
  std::optional<double> Score(size_t m, const MicroBatchPlan& mb);
  // The next micro-batch keeps its layout `mb`.
  void Commit(const MicroBatchPlan& mb);

 private:
  using RankSet = std::vector<int>;
  double Duration(const GroupPlan& g, size_t group, size_t sample) const;
  // The creation delay (ms) of each group of `mb`, the next micro-batch to
  // commit, and the rank sets it creates.
  std::vector<double> OwnDelays(const MicroBatchPlan& mb,
                                std::set<RankSet>& creates) const;
  // Those of `creates` that later micro-batches use.
  std::set<RankSet> UsedLater(const std::set<RankSet>& creates) const;
  // delays_ of the micro-batches after m, as the plan is now.
  void LaterDelays(size_t m);
  double AllGatherMs(double first_ms) const;
  double ReduceScatterMs(double last_ms) const;
  // One micro-batch read backwards into the chains of every draw.
  void ChainBack(size_t m, std::vector<double>& chain,
                 std::vector<char>& seen) const;
  void ComputeCheckpoints(size_t from);
  void LoadBlock(size_t block);

  size_t n_;
  const GradientSync* sync_;
  GroupTimeNoise* noise_;
  size_t samples_;
  const std::vector<MicroBatchPlan>& micro_batches_;
  std::vector<size_t> first_group_;  // each micro-batch's first group index
  std::vector<int> last_use_;  // the last micro-batch using each rank, or -1
  size_t committed_ = 0;
  // Per draw and rank ([sample · N + rank]), after the committed
  // micro-batches: free times, first and last group times (-1 and 0 while
  // none).
  std::vector<double> free_at_, first_ms_, last_ms_;
  size_t block_size_ = 1;
  // The chains before each block's last micro-batch is read back
  // ([(block · S + sample) · N + rank]); empty until the first Score.
  std::vector<double> checkpoints_;
  size_t loaded_block_ = static_cast<size_t>(-1);
  std::vector<double> block_tails_;  // [((m - first) · S + sample) · N + rank]
  std::vector<double> scratch_, cover_ms_;
  // Communicator costs: the held rank sets, creation (ms), the sets created
  // by the committed micro-batches, the number of groups on each set in the
  // micro-batches after the next to commit, the sets the next one creates
  // as planned, each group's delay as the tails assume it, and whether a
  // committed layout changed the later delays since the tails were built.
  const std::set<RankSet>* held_;
  double create_ms_;
  std::set<RankSet> created_;
  std::map<RankSet, int> later_;
  std::set<RankSet> planned_creates_;
  std::vector<double> delays_;
  bool stale_ = false;
};

}  // namespace fcp::planner
