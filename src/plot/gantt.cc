// Gantt chart of plan timelines via gnuplot (include/fcp/plot.h): one panel
// per timeline, a shared time axis, node boundaries (behind the boxes, so they
// never cross a label), neighbour-distinct colours, all-to-all groups hatched,
// a legend, and labels sized to their boxes.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <string>

#include "fcp/io.h"
#include "fcp/plot.h"

namespace fcp::plot {
namespace {

// Tableau 10 plus two: distinguishable on screen and in print.
constexpr const char* kPalette[] = {"#4E79A7", "#F28E2B", "#E15759", "#76B7B2",
                                    "#59A14F", "#EDC948", "#B07AA1", "#FF9DA7",
                                    "#9C755F", "#BAB0AC", "#1F77B4", "#8CD17D"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

// Pixel margins of a panel (gnuplot's defaults are close to these; we set
// them so that label fitting knows the drawing area).
constexpr int kLeftPx = 70, kRightPx = 20, kTopPx = 30, kBottomPx = 45;
// Above the panels: the page title and the legend.
constexpr int kHeaderPx = 60;

std::string Extension(const std::string& path) {
  const auto slash = path.rfind('/');
  const auto dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return "";
  std::string ext = path.substr(dot + 1);
  for (char& c : ext)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

// Maximal runs of consecutive ranks of a slice: {first, last}.
std::vector<std::pair<int, int>> RankRuns(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::vector<std::pair<int, int>> runs;
  for (size_t a = 0; a < ranks.size();) {
    size_t b = a;
    while (b + 1 < ranks.size() && ranks[b + 1] == ranks[b] + 1) ++b;
    runs.push_back({ranks[a], ranks[b]});
    a = b + 1;
  }
  return runs;
}

void CheckExtension(const std::string& path) {
  const std::string ext = Extension(path);
  if (ext != "png" && ext != "svg")
    throw InputError("plot",
                     "'" + EscapeForMessage(path) +
                         "': unknown image type; use a .png or .svg file name");
}

}  // namespace

void CheckOutputPaths(const std::string& plot_path,
                      const std::string& trace_path) {
  if (!plot_path.empty()) {
    CheckExtension(plot_path);
    CheckOutputDirectory(plot_path, "plot");
  }
  if (!trace_path.empty()) CheckOutputDirectory(trace_path, "trace");
}

// Long because: one gnuplot script whose panel layout arithmetic and data
// blocks depend on each other.
void WriteGantt(const std::string& path, std::span<const Timeline> timelines,
                const GanttOptions& options) {
  CheckExtension(path);
  const std::string ext = Extension(path);
  if (timelines.empty()) throw InputError("plot", "nothing to draw");
  double end_ms = 0;
  size_t max_slices = 0;
  int ranks_total = 0;
  for (const auto& t : timelines) {
    if (t.num_ranks < 1) throw InputError("plot", "timeline has no ranks");
    end_ms = std::max(end_ms, t.end_ms);
    max_slices = std::max(max_slices, t.slices.size());
    ranks_total += t.num_ranks;
  }
  if (!(end_ms > 0)) end_ms = 1e-9;
  const int panels = static_cast<int>(timelines.size());
  // Size: ~14 px per rank row (labels of one-rank groups stay legible), at
  // least 260 px per panel; wider when there are many groups.
  const int width =
      options.width_px > 0
          ? options.width_px
          : std::clamp(1200 + 3 * static_cast<int>(max_slices), 1200, 3200);
  const int height =
      options.height_px > 0
          ? options.height_px
          : std::clamp(
                14 * ranks_total + panels * (kTopPx + kBottomPx) + kHeaderPx,
                300, 16000);
  // Each panel's plot area; the layout below fixes the margins in pixels.
  const double area_px =
      std::max(1.0, (static_cast<double>(height) - kHeaderPx -
                     panels * (kTopPx + kBottomPx)) /
                        panels);

  GnuplotJob job;
  job.terminal =
      ext == "svg"
          ? fmt::format(
                "svg size {},{} dynamic font 'sans,9' background rgb 'white'",
                width, height)
          : (PngTerminal() == "pngcairo"
                 ? fmt::format("pngcairo size {},{} font 'sans,9'", width,
                               height)
                 : fmt::format("png size {},{}", width, height));
  std::string title = options.title;
  if (title.empty()) {
    title = timelines.size() == 1
                ? fmt::format("{}: {} ranks ({})", timelines[0].name,
                              timelines[0].num_ranks, timelines[0].source)
                : fmt::format("{} plans, shared time axis ({})",
                              timelines.size(), timelines[0].source);
  }
  std::string gp;
  gp += "set border lw 0.8\n";
  for (int i = 0; i < kPaletteSize; ++i)
    gp += fmt::format("set linetype {} lc rgb '{}'\n", i + 1, kPalette[i]);
  // Margins and spacing in screen fractions so that every panel's plot area
  // is area_px high and the header keeps the title and the legend.
  const double h = height;
  gp += fmt::format(
      "set multiplot layout {},1 title {} noenhanced margins screen {:.6f}, "
      "screen {:.6f}, "
      "screen {:.6f}, screen {:.6f} spacing screen 0, screen {:.6f}\n",
      panels, GnuplotQuote(title), kLeftPx / static_cast<double>(width),
      1.0 - kRightPx / static_cast<double>(width), kBottomPx / h,
      1.0 - (kHeaderPx + kTopPx) / h, (kTopPx + kBottomPx) / h);
  gp += fmt::format(
      "set xrange [0:{:.9g}]\nset xlabel 'time (ms)'\nset ylabel 'rank'\n",
      end_ms);
  gp += "set grid xtics lc rgb '#DDDDDD'\n";
  const double plot_w = width - kLeftPx - kRightPx;

  for (int p = 0; p < panels; ++p) {
    const Timeline& t = timelines[static_cast<size_t>(p)];
    const double row_px = std::max(1.0, area_px / t.num_ranks);
    const std::vector<int> colours = AssignColours(t, kPaletteSize);
    std::string boxes, a2a_boxes, labels;
    std::map<int, double> mb_start;  // micro-batch -> earliest start
    for (size_t i = 0; i < t.slices.size(); ++i) {
      const auto& s = t.slices[i];
      auto [it, inserted] = mb_start.emplace(s.micro_batch, s.start_ms);
      if (!inserted) it->second = std::min(it->second, s.start_ms);
      const auto runs = RankRuns(s.ranks);
      size_t widest = 0;
      std::string& out = s.comm == CommKind::kAllToAll ? a2a_boxes : boxes;
      for (size_t r = 0; r < runs.size(); ++r) {
        out += fmt::format("{:.9g} {:.9g} {} {} {}\n", s.start_ms, s.end_ms,
                           runs[r].first - 0.45, runs[r].second + 0.45,
                           colours[i] + 1);
        if (runs[r].second - runs[r].first >
            runs[widest].second - runs[widest].first)
          widest = r;
      }
      const auto [lo, hi] = runs[widest];
      const std::string label =
          FitLabel(s, (s.end_ms - s.start_ms) / end_ms * plot_w,
                   (hi - lo + 0.9) * row_px);
      if (!label.empty())
        labels += fmt::format("{:.9g} {} \"{}\"\n", (s.start_ms + s.end_ms) / 2,
                              (lo + hi) / 2.0, label);
    }
    // gnuplot refuses an empty data file: a zero-size box off the time axis.
    if (boxes.empty()) boxes = "-1 -1 0 0 1\n";
    if (a2a_boxes.empty()) a2a_boxes = "-1 -1 0 0 1\n";
    if (labels.empty()) labels = "0 0 \"\"\n";
    const std::string box_file = fmt::format("boxes{}.dat", p);
    const std::string a2a_file = fmt::format("a2a{}.dat", p);
    const std::string label_file = fmt::format("labels{}.dat", p);
    job.data_files.push_back({box_file, boxes});
    job.data_files.push_back({a2a_file, a2a_boxes});
    job.data_files.push_back({label_file, labels});

    gp += "unset arrow\n";
    if (panels > 1)  // one panel: the page title says it all
      gp += fmt::format("set title {} noenhanced\n",
                        GnuplotQuote(fmt::format("{} ({}, {} ranks)", t.name,
                                                 t.source, t.num_ranks)));
    gp += fmt::format("set yrange [{}:-0.5]\n",
                      t.num_ranks - 0.5);  // rank 0 on top
    const int per_node = std::max(1, t.ranks_per_node);
    gp += t.num_ranks > 32 ? fmt::format("set ytics 0,{}\n", per_node)
                           : "set ytics 0,1\n";
    for (int b = per_node; b < t.num_ranks; b += per_node)
      gp += fmt::format(
          "set arrow from graph 0, first {} to graph 1, first {} nohead dt 2 "
          "lw "
          "1.5 lc rgb '#202020' back\n",
          b - 0.5, b - 0.5);
    if (t.source == "planner estimate") {
      for (const auto& [mb, start] : mb_start)
        if (start > 0)
          gp += fmt::format(
              "set arrow from first {:.9g}, graph 0 to first {:.9g}, graph 1 "
              "nohead lw 0.8 lc rgb '#808080' back\n",
              start, start);
    }
    // The legend, once (on the first panel, above the plots): what a box's
    // fill, a dashed line and a label's d / k mean.
    if (p == 0) {
      gp += fmt::format(
          "set key at screen 0.5, screen {:.6f} center top horizontal samplen "
          "2 "
          "font ',9' noenhanced\n",
          1.0 - 28.0 / h);
    } else {
      gp += "unset key\n";
    }
    const bool legend = p == 0;
    gp += fmt::format(
        "plot '{}' using (($1+$2)/2):(($3+$4)/2):1:2:3:4:5 with boxxyerror fs "
        "solid 0.85 "
        "border lc rgb '#303030' lc variable title {}, "
        "'{}' using (($1+$2)/2):(($3+$4)/2):1:2:3:4:5 with boxxyerror fs "
        "pattern 4 "
        "border lc rgb '#303030' lc variable title {}, "
        "NaN with lines dt 2 lw 1.5 lc rgb '#202020' title {}, "
        "'{}' using 1:2:3 with labels center font ',8' noenhanced title {}\n",
        box_file, legend ? "'ring group'" : "''", a2a_file,
        legend ? "'all-to-all group (hatched)'" : "''",
        legend ? "'node boundary'" : "''", label_file,
        legend ? "'box label: d=ranks in the group, k=its sequences, tokens'"
               : "''");
  }
  gp += "unset multiplot\n";
  job.script = gp;
  RunGnuplot(job, path);
}

}  // namespace fcp::plot
