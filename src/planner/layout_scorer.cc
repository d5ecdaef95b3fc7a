#include "planner/layout_scorer.h"

#include <algorithm>

namespace fcp::planner {
namespace {

// The list schedule (ListScheduleMs) runs each micro-batch's groups on the
// ranks' free times `free_at` (ms), updated in place.
void RunMicroBatch(const MicroBatchPlan& mb, std::vector<double>& free_at) {
  for (const GroupPlan& g : mb.groups) {
    double start = 0;
    for (int rank : g.ranks) start = std::max(start, free_at[rank]);
    for (int rank : g.ranks) free_at[rank] = start + g.est_ms;
  }
}

}  // namespace

LayoutScorer::LayoutScorer(int num_ranks, const GradientSync* sync,
                           const std::vector<MicroBatchPlan>& micro_batches)
    : n_(static_cast<size_t>(num_ranks)),
      sync_(sync),
      micro_batches_(micro_batches),
      last_use_(n_, -1),
      free_at_(n_, 0.0),
      first_ms_(n_, -1.0),
      last_ms_(n_, 0.0) {
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    for (const GroupPlan& g : micro_batches[m].groups) {
      for (int rank : g.ranks) last_use_[rank] = static_cast<int>(m);
    }
  }
}

bool LayoutScorer::CanScore(size_t m) const {
  if (!sync_) return true;
  for (size_t r = 0; r < n_; ++r) {
    if (last_use_[r] > static_cast<int>(m) && first_ms_[r] < 0) return false;
  }
  return true;
}

// A rank's step terms (StepMs): the all-gather exposed behind its first
// group and the reduce-scatter behind its last (ms; -1: no first group).
double LayoutScorer::AllGatherMs(double first_ms) const {
  return ExposedSyncMs(*sync_, sync_->forward_share * std::max(0.0, first_ms));
}
double LayoutScorer::ReduceScatterMs(double last_ms) const {
  return ExposedSyncMs(*sync_, (1 - sync_->forward_share) * last_ms);
}

double LayoutScorer::Score(size_t m, const MicroBatchPlan& mb) {
  if (tails_.empty()) ComputeTails(m);
  scratch_ = free_at_;
  RunMicroBatch(mb, scratch_);
  if (sync_) {
    cover_ms_.assign(n_, -1.0);
    for (const GroupPlan& g : mb.groups) {
      for (int rank : g.ranks) cover_ms_[rank] = g.est_ms;
    }
  }
  const double* tail = &tails_[m * n_];
  double score_ms = 0;
  for (size_t r = 0; r < n_; ++r) {
    double ms = scratch_[r];
    if (last_use_[r] > static_cast<int>(m)) {
      ms += tail[r];
    } else if (sync_) {  // added as StepMs adds them
      const double first = first_ms_[r] >= 0 ? first_ms_[r] : cover_ms_[r];
      const double last = cover_ms_[r] >= 0 ? cover_ms_[r] : last_ms_[r];
      ms = AllGatherMs(first) + ms + ReduceScatterMs(last);
    }
    score_ms = std::max(score_ms, ms);
  }
  return score_ms;
}

void LayoutScorer::Commit(const MicroBatchPlan& mb) {
  RunMicroBatch(mb, free_at_);
  for (const GroupPlan& g : mb.groups) {
    for (int rank : g.ranks) {
      if (first_ms_[rank] < 0) first_ms_[rank] = g.est_ms;
      last_ms_[rank] = g.est_ms;
    }
  }
}

// Every tail from micro-batch `from` on, once: with a sync the chains end in
// the step terms of the ranks with groups after `from`, whose first groups
// are known (CanScore(from)) and stay so; the ranks with groups after a
// later m are among them.
void LayoutScorer::ComputeTails(size_t from) {
  tails_.resize(micro_batches_.size() * n_);
  std::vector<double> chain(n_, 0.0);
  std::vector<char> seen(n_, 0);
  for (size_t m = micro_batches_.size(); m-- > from;) {
    std::copy(chain.begin(), chain.end(), tails_.begin() + m * n_);
    const std::vector<GroupPlan>& groups = micro_batches_[m].groups;
    for (auto g = groups.rbegin(); g != groups.rend(); ++g) {
      double longest = 0;
      for (int rank : g->ranks) {
        if (!seen[rank]) {  // its last group: the chain ends in its terms
          seen[rank] = 1;
          chain[rank] =
              sync_ ? AllGatherMs(first_ms_[rank]) + ReduceScatterMs(g->est_ms)
                    : 0.0;
        }
        longest = std::max(longest, chain[rank]);
      }
      for (int rank : g->ranks) chain[rank] = g->est_ms + longest;
    }
  }
}

}  // namespace fcp::planner
