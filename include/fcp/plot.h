// Plan timelines: the same picture as a Chrome trace / Perfetto JSON (to open
// in ui.perfetto.dev or chrome://tracing) and as a Gantt chart (PNG or SVG via
// gnuplot). See docs/plots.md.
//
// No shell is involved anywhere: gnuplot is started with fork/exec, reads a
// script and data files from a private mkdtemp directory (file names chosen
// here, never the user's), and writes the image to its stdout, which is a
// mkstemp file beside the destination that is renamed over it on success.
// User paths therefore never reach gnuplot or a shell, a failure leaves
// nothing half-written, and a symlink at the destination is replaced, not
// followed.
//
// Units: milliseconds in Timeline, microseconds in the trace JSON (its format).
// Thread-safety: every function is safe to call concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fcp/simulator.h"
#include "fcp/types.h"

namespace fcp::plot {

// One CP group of one micro-batch, as it runs on its ranks.
struct TimelineSlice {
  int micro_batch = 0;
  int group = 0;           // index in the micro-batch's group list
  std::vector<int> ranks;  // global ranks, ring order
  double start_ms = 0;
  double end_ms = 0;
  int num_sequences = 0;
  int64_t tokens = 0;  // unpadded tokens of the group's sequences
  CommKind comm = CommKind::kRing;
};

// The timeline of one plan; groups without sequences are left out.
struct Timeline {
  std::string name;    // e.g. the strategy: a panel title / trace process label
  std::string source;  // "planner estimate" or "simulated"
  int num_ranks = 0;
  int ranks_per_node = 1;
  std::vector<TimelineSlice> slices;
  double end_ms = 0;  // last slice end
};

// The planner's view, the schedule behind the plan's est_ms (ListScheduleMs):
// each group lasts its est_ms and starts when all its ranks are free
// (micro-batches in order, no barrier between them).
// Throws InputError("plot", ...) when the plan is not kOk or refers to a
// sequence outside `sequences` or a rank outside [0, num_ranks).
Timeline PlanTimeline(const Plan& plan, std::span<const Sequence> sequences,
                      int ranks_per_node);

// The simulator's view: start and end of every group as sim::SimulatePlan ran
// it (SimResult::group_spans; ranks proceed independently).
Timeline SimulatedTimeline(const Plan& plan,
                           std::span<const Sequence> sequences,
                           const sim::SimResult& result, int ranks_per_node);

// Chrome trace event JSON (the "JSON Array/Object Format" Perfetto and
// chrome://tracing open): one process per node and timeline ("<name>: node
// k"), one thread (track) per rank, one complete event ("ph": "X") per group
// and rank with the group's facts in "args".
std::string TraceJson(std::span<const Timeline> timelines);
// TraceJson written atomically to `path`; InputError("trace", ...) when the
// path cannot be written.
void WriteTrace(const std::string& path, std::span<const Timeline> timelines);

// --- Gantt chart ---
// Colour index of every slice (0 .. palette_size-1): slices that touch (share
// a rank and follow each other in time, or sit on neighbouring ranks at
// overlapping times) get different colours whenever the palette allows
// (greedy colouring in time order).
std::vector<int> AssignColours(const Timeline& timeline, int palette_size);
// Whether two slices touch in the sense above.
bool SlicesTouch(const TimelineSlice& a, const TimelineSlice& b);

// The label drawn in a box of width_px × height_px: "d=4 k=3 12.3k tok",
// shorter variants, or "" when none fits. Text is assumed to need
// char_px pixels per character and line_px of height.
std::string FitLabel(const TimelineSlice& slice, double width_px,
                     double height_px, double char_px = 6.0,
                     double line_px = 10.0);

struct GanttOptions {
  std::string title;  // default: from the timelines
  int width_px = 0;   // 0 = chosen from the number of slices
  int height_px = 0;  // 0 = chosen from the number of ranks
};
// Draws ranks (y) × time (x), one panel per timeline stacked with a shared
// time axis, node boundaries as dashed lines, micro-batch ends as thin
// vertical lines. The format follows the extension: .png (pngcairo, or png)
// or .svg. Throws InputError("plot", ...) for an unknown extension, an empty
// timeline list or a path that cannot be written, and PlotError when gnuplot
// is missing or fails.
void WriteGantt(const std::string& path, std::span<const Timeline> timelines,
                const GanttOptions& options = {});

// Checks before a long run that `plot_path` (if not empty) has a .png/.svg
// extension and that the directories of both paths exist, so that a typo
// fails at once rather than after the work. InputError("plot"/"trace").
void CheckOutputPaths(const std::string& plot_path,
                      const std::string& trace_path);

// --- gnuplot without a shell (also used by `fcp eval paper`) ---
class PlotError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct GnuplotJob {
  // Terminal line without "set terminal", e.g. "pngcairo size 1100,500".
  std::string terminal;
  // gnuplot commands after the terminal; must not `set output` (the output is
  // gnuplot's stdout). Data files are referred to by their bare names.
  std::string script;
  // Files written into the private working directory: {name, contents};
  // names must match [A-Za-z0-9._-]+ (PlotError otherwise).
  std::vector<std::pair<std::string, std::string>> data_files;
};
// Runs `job` and writes the image to `out_path` atomically. InputError("plot")
// when out_path cannot be written; PlotError (one line, with gnuplot's first
// error line) when gnuplot is missing or fails.
void RunGnuplot(const GnuplotJob& job, const std::string& out_path);
// Whether `gnuplot` is on PATH (searched without a shell).
bool GnuplotAvailable();
// "pngcairo" when this gnuplot has it, else "png".
std::string PngTerminal();
// A gnuplot single-quoted string literal for `text`: ' doubled, control
// characters (newline included) replaced by spaces, so that it cannot end
// the command it sits in.
std::string GnuplotQuote(std::string_view text);

}  // namespace fcp::plot
