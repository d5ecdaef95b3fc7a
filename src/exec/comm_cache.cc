#include "exec/comm_cache.h"

#include "exec/clock.h"
#include "fcp/check.h"

namespace fcp::exec {

Communicator* CommCache::Acquire(const std::vector<std::vector<int>>& groups) {
  const int me = world_.rank();
  const double t0 = NowS();
  int my_group = -1;
  int my_pos = -1;
  bool any_missing = false;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      FCP_CHECK(groups[g][i] >= 0 && groups[g][i] < world_.size());
      if (groups[g][i] == me) {
        FCP_CHECK(my_group < 0);  // disjoint groups
        my_group = static_cast<int>(g);
        my_pos = static_cast<int>(i);
      }
    }
    if (!known_.count(groups[g])) any_missing = true;
  }
  if (!any_missing) {
    if (my_group < 0) return nullptr;
    Communicator* c = known_.at(groups[my_group]).get();
    stats_.hits++;
    stats_.hit_s += NowS() - t0;
    return c;
  }
  // One collective split creates every missing group of this micro-batch.
  const bool mine_missing = my_group >= 0 && !known_.count(groups[my_group]);
  std::unique_ptr<Communicator> created =
      world_.Split(mine_missing ? my_group : -1, my_pos);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (known_.count(groups[g])) continue;
    if (static_cast<int>(g) == my_group) {
      FCP_CHECK(created &&
                created->size() == static_cast<int>(groups[g].size()));
      known_[groups[g]] = std::move(created);
    } else {
      known_[groups[g]] = nullptr;
    }
  }
  stats_.splits++;
  if (my_group < 0) return nullptr;
  if (mine_missing) {
    stats_.misses++;
    stats_.create_s += NowS() - t0;
  } else {
    stats_.hits++;  // own group cached; the time went into others' split
    stats_.create_s += NowS() - t0;
  }
  return known_.at(groups[my_group]).get();
}

}  // namespace fcp::exec
