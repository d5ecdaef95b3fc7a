// Chrome trace event JSON of plan timelines (include/fcp/plot.h). Format:
// "Trace Event Format" (the JSON Object Format with "traceEvents"), which
// Perfetto and chrome://tracing read: metadata events ("ph": "M") name the
// processes (one per node and timeline) and threads (one per rank); complete
// events ("ph": "X") carry ts and dur in microseconds.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "fcp/io.h"
#include "fcp/plot.h"

namespace fcp::plot {

std::string TraceJson(std::span<const Timeline> timelines) {
  using json = nlohmann::ordered_json;
  json events = json::array();
  int pid_base = 0;
  for (size_t t = 0; t < timelines.size(); ++t) {
    const Timeline& tl = timelines[t];
    const int per_node = std::max(1, tl.ranks_per_node);
    const int nodes = std::max(1, (tl.num_ranks + per_node - 1) / per_node);
    const std::string prefix = tl.name.empty() ? std::string() : tl.name + ": ";
    for (int node = 0; node < nodes; ++node) {
      const int pid = pid_base + node;
      events.push_back(
          {{"name", "process_name"},
           {"ph", "M"},
           {"pid", pid},
           {"tid", 0},
           {"args", {{"name", fmt::format("{}node {}", prefix, node)}}}});
      events.push_back({{"name", "process_sort_index"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"tid", 0},
                        {"args", {{"sort_index", pid}}}});
    }
    for (int rank = 0; rank < tl.num_ranks; ++rank) {
      const int pid = pid_base + rank / per_node;
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"tid", rank},
                        {"args", {{"name", fmt::format("rank {}", rank)}}}});
      events.push_back({{"name", "thread_sort_index"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"tid", rank},
                        {"args", {{"sort_index", rank}}}});
    }
    for (const auto& s : tl.slices) {
      const int degree = static_cast<int>(s.ranks.size());
      json args = {
          {"micro_batch", s.micro_batch},
          {"group", s.group},
          {"degree", degree},
          {"ranks", s.ranks},
          {"sequences", s.num_sequences},
          {"tokens", s.tokens},
          {"comm", s.comm == CommKind::kAllToAll ? "all-to-all" : "ring"},
          {"time_ms", s.end_ms - s.start_ms},
          {"source", tl.source}};
      for (int rank : s.ranks) {
        events.push_back({{"name", fmt::format("mb{} g{} d={}", s.micro_batch,
                                               s.group, degree)},
                          {"cat", "cp_group"},
                          {"ph", "X"},
                          {"ts", 1e3 * s.start_ms},
                          {"dur", 1e3 * (s.end_ms - s.start_ms)},
                          {"pid", pid_base + rank / per_node},
                          {"tid", rank},
                          {"args", args}});
      }
    }
    pid_base += nodes;
  }
  json meta = json::array();
  for (const auto& tl : timelines) {
    meta.push_back({{"name", tl.name},
                    {"source", tl.source},
                    {"ranks", tl.num_ranks},
                    {"ranks_per_node", tl.ranks_per_node},
                    {"end_ms", tl.end_ms}});
  }
  json out = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData", {{"generator", "fcp"}, {"timelines", meta}}}};
  return out.dump(1);
}

void WriteTrace(const std::string& path, std::span<const Timeline> timelines) {
  if (timelines.empty()) throw InputError("trace", "nothing to write");
  WriteFileAtomically(path, TraceJson(timelines) + "\n", "trace");
}

}  // namespace fcp::plot
