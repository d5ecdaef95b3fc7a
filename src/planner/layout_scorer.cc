#include "planner/layout_scorer.h"

#include <algorithm>
#include <cmath>

namespace fcp::planner {
namespace {

// One micro-batch of the list schedule on the ranks' free times `free_at`
// (ms, updated): group i runs for duration(i) ms from delay_ms[i] after all
// its ranks are free; on_rank(rank, ms) sees each of its ranks.
template <class Duration, class OnRank>
void RunGroups(const MicroBatchPlan& mb, double* free_at,
               const std::vector<double>& delay_ms, Duration&& duration,
               OnRank&& on_rank) {
  for (size_t i = 0; i < mb.groups.size(); ++i) {
    const GroupPlan& g = mb.groups[i];
    const double ms = duration(i);
    double start = 0;
    for (int rank : g.ranks) start = std::max(start, free_at[rank]);
    start += delay_ms[i];
    for (int rank : g.ranks) {
      free_at[rank] = start + ms;
      on_rank(rank, ms);
    }
  }
}

// A group's rank set, sorted, when it needs a communicator (d > 1); else
// empty.
std::vector<int> RankSetOf(const GroupPlan& g) {
  if (g.ranks.size() <= 1) return {};
  std::vector<int> set = g.ranks;
  std::sort(set.begin(), set.end());
  return set;
}

}  // namespace

LayoutScorer::LayoutScorer(int num_ranks, const GradientSync* sync,
                           GroupTimeNoise* noise,
                           const std::set<std::vector<int>>* held,
                           double create_s,
                           const std::vector<MicroBatchPlan>& micro_batches)
    : n_(static_cast<size_t>(num_ranks)),
      sync_(sync),
      noise_(noise && noise->sigma() > 0 ? noise : nullptr),
      samples_(noise_ ? static_cast<size_t>(noise_->samples()) : 1),
      micro_batches_(micro_batches),
      first_group_(micro_batches.size()),
      last_use_(n_, -1),
      free_at_(samples_ * n_, 0.0),
      first_ms_(samples_ * n_, -1.0),
      last_ms_(samples_ * n_, 0.0),
      held_(held),
      create_ms_(held ? 1000.0 * create_s : 0.0) {
  size_t groups = 0;
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    first_group_[m] = groups;
    groups += micro_batches[m].groups.size();
    for (const GroupPlan& g : micro_batches[m].groups) {
      for (int rank : g.ranks) last_use_[rank] = static_cast<int>(m);
    }
  }
  delays_.assign(groups, 0.0);
  if (held_) {
    for (size_t m = 1; m < micro_batches.size(); ++m) {
      for (const GroupPlan& g : micro_batches[m].groups) {
        const RankSet set = RankSetOf(g);
        if (!set.empty() && !held_->count(set)) ++later_[set];
      }
    }
    if (!micro_batches.empty()) OwnDelays(micro_batches[0], planned_creates_);
  }
  block_size_ = std::max<size_t>(
      1, static_cast<size_t>(
             std::sqrt(static_cast<double>(micro_batches.size()))));
}

double LayoutScorer::Duration(const GroupPlan& g, size_t group,
                              size_t sample) const {
  return noise_ ? g.est_ms * noise_->Factor(static_cast<int>(sample), group)
                : g.est_ms;
}

// A rank's step terms (StepMs): the all-gather exposed behind its first
// group and the reduce-scatter behind its last (ms; -1: no first group).
double LayoutScorer::AllGatherMs(double first_ms) const {
  return ExposedSyncMs(*sync_, sync_->forward_share * std::max(0.0, first_ms));
}
double LayoutScorer::ReduceScatterMs(double last_ms) const {
  return ExposedSyncMs(*sync_, (1 - sync_->forward_share) * last_ms);
}

bool LayoutScorer::CanScore(size_t m) const {
  if (!sync_) return true;
  for (size_t r = 0; r < n_; ++r) {
    if (last_use_[r] > static_cast<int>(m) && first_ms_[r] < 0) return false;
  }
  return true;
}

std::vector<double> LayoutScorer::OwnDelays(const MicroBatchPlan& mb,
                                            std::set<RankSet>& creates) const {
  creates.clear();
  std::vector<double> delays(mb.groups.size(), 0.0);
  if (!held_) return delays;
  for (size_t i = 0; i < mb.groups.size(); ++i) {  // NewCommunicatorDelaysMs
    RankSet set = RankSetOf(mb.groups[i]);
    if (set.empty() || held_->count(set) || created_.count(set)) continue;
    if (creates.insert(std::move(set)).second) delays[i] = create_ms_;
  }
  return delays;
}

std::set<std::vector<int>> LayoutScorer::UsedLater(
    const std::set<RankSet>& creates) const {
  std::set<RankSet> used;
  for (const RankSet& set : creates) {
    if (later_.count(set)) used.insert(set);
  }
  return used;
}

void LayoutScorer::LaterDelays(size_t m) {
  std::set<RankSet> created = created_;
  created.insert(planned_creates_.begin(), planned_creates_.end());
  for (size_t j = m + 1; j < micro_batches_.size(); ++j) {
    const std::vector<GroupPlan>& groups = micro_batches_[j].groups;
    for (size_t i = 0; i < groups.size(); ++i) {
      RankSet set = RankSetOf(groups[i]);
      const bool creates = !set.empty() && !held_->count(set) &&
                           created.insert(std::move(set)).second;
      delays_[first_group_[j] + i] = creates ? create_ms_ : 0.0;
    }
  }
}

std::optional<double> LayoutScorer::Score(size_t m, const MicroBatchPlan& mb) {
  std::set<RankSet> creates;
  const std::vector<double> own_delays = OwnDelays(mb, creates);
  if (held_ && UsedLater(creates) != UsedLater(planned_creates_))
    return std::nullopt;
  if (checkpoints_.empty() || stale_) {
    if (held_) LaterDelays(m);
    ComputeCheckpoints(m);
    stale_ = false;
    loaded_block_ = static_cast<size_t>(-1);
  }
  if (m / block_size_ != loaded_block_) LoadBlock(m / block_size_);
  const size_t first_group = first_group_[m];
  double sum = 0;
  for (size_t s = 0; s < samples_; ++s) {
    const size_t at = s * n_;
    scratch_.assign(free_at_.begin() + at, free_at_.begin() + at + n_);
    if (sync_) cover_ms_.assign(n_, -1.0);  // each rank's group time in m
    RunGroups(
        mb, scratch_.data(), own_delays,
        [&](size_t i) { return Duration(mb.groups[i], first_group + i, s); },
        [&](int rank, double ms) {
          if (sync_) cover_ms_[rank] = ms;
        });
    double score_ms = 0;
    const double* tail =
        &block_tails_[((m - loaded_block_ * block_size_) * samples_ + s) * n_];
    for (size_t r = 0; r < n_; ++r) {
      if (last_use_[r] > static_cast<int>(m)) {
        score_ms = std::max(score_ms, scratch_[r] + tail[r]);
      } else if (!sync_) {
        score_ms = std::max(score_ms, scratch_[r]);
      }
    }
    if (sync_) {  // the ranks ending in m, their terms added as StepMs adds
      for (size_t r = 0; r < n_; ++r) {
        if (last_use_[r] > static_cast<int>(m)) continue;
        const double first =
            first_ms_[at + r] >= 0 ? first_ms_[at + r] : cover_ms_[r];
        const double last = cover_ms_[r] >= 0 ? cover_ms_[r] : last_ms_[at + r];
        score_ms = std::max(
            score_ms, AllGatherMs(first) + scratch_[r] + ReduceScatterMs(last));
      }
    }
    sum += score_ms;
  }
  return noise_ ? sum / static_cast<double>(samples_) : sum;
}

void LayoutScorer::Commit(const MicroBatchPlan& mb) {
  const size_t first_group = first_group_[committed_];
  std::set<RankSet> creates;
  const std::vector<double> own_delays = OwnDelays(mb, creates);
  // A layout that creates other sets used later changes later delays.
  if (held_ && UsedLater(creates) != UsedLater(planned_creates_)) stale_ = true;
  for (size_t s = 0; s < samples_; ++s) {
    const size_t at = s * n_;
    RunGroups(
        mb, &free_at_[at], own_delays,
        [&](size_t i) { return Duration(mb.groups[i], first_group + i, s); },
        [&](int rank, double ms) {
          if (first_ms_[at + rank] < 0) first_ms_[at + rank] = ms;
          last_ms_[at + rank] = ms;
        });
  }
  ++committed_;
  if (!held_) return;
  created_.insert(creates.begin(), creates.end());
  if (committed_ >= micro_batches_.size()) return;
  const MicroBatchPlan& next = micro_batches_[committed_];  // as planned
  for (const GroupPlan& g : next.groups) {
    const RankSet set = RankSetOf(g);
    auto it = later_.find(set);
    if (it != later_.end() && --it->second == 0) later_.erase(it);
  }
  OwnDelays(next, planned_creates_);
}

void LayoutScorer::ChainBack(size_t m, std::vector<double>& chain,
                             std::vector<char>& seen) const {
  const std::vector<GroupPlan>& groups = micro_batches_[m].groups;
  for (size_t i = groups.size(); i-- > 0;) {
    const GroupPlan& g = groups[i];
    for (size_t s = 0; s < samples_; ++s) {
      const size_t at = s * n_;
      const double ms = Duration(g, first_group_[m] + i, s);
      double longest = 0;
      for (int rank : g.ranks) {
        if (!seen[rank]) {  // its last group: the chain ends in its terms
          chain[at + rank] =
              sync_ ? AllGatherMs(first_ms_[at + rank]) + ReduceScatterMs(ms)
                    : 0.0;
        }
        longest = std::max(longest, chain[at + rank]);
      }
      const double delay = delays_[first_group_[m] + i];
      for (int rank : g.ranks) chain[at + rank] = delay + ms + longest;
    }
    for (int rank : g.ranks) seen[rank] = 1;
  }
}

// The chains before each block's last micro-batch is read back, from the
// plan's end down to micro-batch `from`'s block, once: with a sync they end
// in the step terms of ranks with groups after `from`, whose first groups
// are known (CanScore(from)) and stay so; the ranks with groups after a
// later m are among them.
void LayoutScorer::ComputeCheckpoints(size_t from) {
  const size_t c = micro_batches_.size();
  const size_t blocks = (c + block_size_ - 1) / block_size_;
  checkpoints_.assign(blocks * samples_ * n_, 0.0);
  std::vector<double> chain(samples_ * n_, 0.0);
  std::vector<char> seen(n_, 0);
  for (size_t m = c; m-- > from / block_size_ * block_size_;) {
    if (m + 1 == c || (m + 1) % block_size_ == 0) {
      std::copy(chain.begin(), chain.end(),
                checkpoints_.begin() + m / block_size_ * samples_ * n_);
    }
    ChainBack(m, chain, seen);
  }
}

// Every tail of the block's micro-batches, read back from its checkpoint.
void LayoutScorer::LoadBlock(size_t block) {
  const size_t first = block * block_size_;
  const size_t last = std::min(micro_batches_.size(), first + block_size_) - 1;
  std::vector<double> chain(checkpoints_.begin() + block * samples_ * n_,
                            checkpoints_.begin() + (block + 1) * samples_ * n_);
  std::vector<char> seen(n_);
  for (size_t r = 0; r < n_; ++r)
    seen[r] = last_use_[r] > static_cast<int>(last);
  block_tails_.resize((last - first + 1) * samples_ * n_);
  for (size_t m = last + 1; m-- > first;) {
    std::copy(chain.begin(), chain.end(),
              block_tails_.begin() + (m - first) * samples_ * n_);
    if (m > first) ChainBack(m, chain, seen);
  }
  loaded_block_ = block;
}

}  // namespace fcp::planner
