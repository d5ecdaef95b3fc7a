// Communicator cache keyed by rank set (ring order): a CP group that recurs
// across micro-batches reuses its communicator instead of calling Split
// (MPI_Comm_split) again. Thread-safety: one thread (the one driving `world`).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "exec/communicator.h"

namespace fcp::exec {

struct CommCacheStats {
  int64_t hits = 0;     // group lookups served from the cache (this rank)
  int64_t misses = 0;   // groups created by Split (this rank's group)
  int64_t splits = 0;   // collective Split calls made
  double create_s = 0;  // total wall time in Split calls (s)
  double hit_s = 0;     // total wall time of cache hits (s)
};

class CommCache {
 public:
  explicit CommCache(Communicator& world) : world_(world) {}

  // Collective over `world`: every rank passes the same list of disjoint rank
  // sets (one micro-batch's CP groups; ranks in ring order). Returns this
  // rank's group communicator (its rank = position in the set), or nullptr if
  // this rank is in no group. Groups not cached yet are created by one Split
  // shared by all of them; sets of size 1 get a Split too (so that every rank
  // drives its degree-1 group through the same code path).
  Communicator* Acquire(const std::vector<std::vector<int>>& groups);

  const CommCacheStats& stats() const { return stats_; }
  size_t size() const { return known_.size(); }

 private:
  Communicator& world_;
  // Every rank set ever created (also those this rank is not in, so that all
  // ranks agree on what is a miss); value is null when this rank is outside.
  std::map<std::vector<int>, std::unique_ptr<Communicator>> known_;
  CommCacheStats stats_;
};

}  // namespace fcp::exec
