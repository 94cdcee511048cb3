// The tuning plot: best-so-far GFLOP/s (or GB/s) against trial, one line per strategy, with the
// hand-written kernel's as a dashed reference (mls-tune --svg); and the comparison of strategies over
// seeds (mls-tune sgemm --strategy compare).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mls/common/error.hpp"
#include "mls/common/svg.hpp"
#include "mls/kernels/tune.hpp"

namespace mls::kernels::tune {

std::string tuning_curve_svg(const std::vector<TuningCurve>& curves, double reference_gflops,
                             const std::string& reference_label, const std::string& title, const std::string& unit) {
  MLS_CHECK(!curves.empty(), "tuning_curve_svg: no curves to draw");
  std::size_t trials = 0;
  double top = reference_gflops;
  for (const auto& c : curves) {
    MLS_CHECK(!c.best_so_far.empty(), "tuning_curve_svg: curve '", c.label, "' has no trials");
    trials = std::max(trials, c.best_so_far.size());
    for (double g : c.best_so_far) {
      MLS_CHECK(std::isfinite(g) && g >= 0, "tuning_curve_svg: curve '", c.label, "' has ", unit, " ", g);
      top = std::max(top, g);
    }
  }
  MLS_CHECK(std::isfinite(reference_gflops) && reference_gflops >= 0, "tuning_curve_svg: reference ", unit, " ",
            reference_gflops, " must be finite and >= 0");
  if (top <= 0) top = 1;
  const double width = 720, height = 420, left = 70, right = 20, plot_top = 40, bottom = 50;
  const svg::Scale X(1, static_cast<double>(std::max<std::size_t>(trials, 2)), left, width - right);
  const svg::Scale Y(0, top * 1.08, height - bottom, plot_top);
  svg::Document d(width, height, {.font_size = 11});
  d.x_axis(X, height - bottom, {.grid = "#eee", .grid_to = plot_top, .title = "trial", .title_gap = 36});
  d.y_axis(Y, left, {.grid = "#ddd", .grid_to = width - right, .title = "best " + unit + " so far", .title_gap = 45});
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};
  std::vector<svg::LegendEntry> legend;
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const auto& c = curves[i];
    // A step line from the first trial that passed: the best stays until a better trial.
    std::vector<svg::Point> pts;
    double last = 0;
    for (std::size_t t = 0; t < c.best_so_far.size(); ++t) {
      const double v = c.best_so_far[t], x = X(static_cast<double>(t + 1));
      if (v <= 0 || v == last) continue;  // nothing passed yet, or no better
      if (!pts.empty()) pts.push_back({x, pts.back().y});
      pts.push_back({x, Y(v)});
      last = v;
    }
    const double x_end = X(static_cast<double>(c.best_so_far.size()));
    if (!pts.empty() && pts.back().x < x_end) pts.push_back({x_end, pts.back().y});
    const char* col = kColors[i % 5];
    d.polyline(pts, {.cls = "curve", .stroke = col, .stroke_width = 2, .extra = {{"data-strategy", c.label}}});
    char best[96];
    std::snprintf(best, sizeof best, " (best %.1f %s)", c.best_so_far.back(), unit.c_str());
    legend.push_back({c.label + best, col, svg::LegendEntry::Line});
  }
  if (reference_gflops > 0) {
    d.line(left, Y(reference_gflops), width - right, Y(reference_gflops),
           {.cls = "reference", .stroke = "#555", .stroke_width = 1, .dash = "6,4"});
    char ref[96];
    std::snprintf(ref, sizeof ref, " (%.1f %s)", reference_gflops, unit.c_str());
    legend.push_back({reference_label + ref, "#555", svg::LegendEntry::Line, "6,4"});
  }
  // Bottom right: the curves climb from the left and end high.
  d.legend(width - right - 260, height - bottom - 16.0 * static_cast<double>(legend.size()), legend, {.row = 16});
  d.text(width / 2, 22, title, {.anchor = svg::Anchor::Middle, .size = 13});
  return d.str();
}

int trials_to_reach(const std::vector<double>& best_so_far, double target) {
  for (std::size_t i = 0; i < best_so_far.size(); ++i)
    if (best_so_far[i] >= target) return static_cast<int>(i + 1);
  return 0;
}

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

StrategyComparison compare_strategies(
    const std::vector<std::pair<std::string, std::vector<std::vector<double>>>>& curves, double fraction,
    double best_gflops) {
  MLS_CHECK(!curves.empty(), "compare_strategies: no strategy to compare");
  MLS_CHECK(fraction > 0 && fraction <= 1, "compare_strategies: fraction ", fraction, " must be in (0, 1]");
  StrategyComparison c;
  for (const auto& [name, runs] : curves) {
    MLS_CHECK(!runs.empty(), "compare_strategies: strategy '", name, "' has no runs");
    for (const auto& r : runs) {
      MLS_CHECK(!r.empty(), "compare_strategies: a run of strategy '", name, "' has no trials");
      c.best_gflops = std::max(c.best_gflops, r.back());
    }
  }
  MLS_CHECK(c.best_gflops > 0, "compare_strategies: no trial passed in any run");
  if (best_gflops > 0) c.best_gflops = best_gflops;
  c.target = fraction * c.best_gflops;
  for (const auto& [name, runs] : curves) {
    StrategyComparison::Row row;
    row.strategy = name;
    std::size_t longest = 0;
    for (const auto& r : runs) longest = std::max(longest, r.size());
    row.trials = static_cast<int>(longest);
    std::vector<double> counted;
    for (const auto& r : runs) {
      const int t = trials_to_reach(r, c.target);
      row.trials_to_target.push_back(t);
      counted.push_back(t > 0 ? t : row.trials + 1);
    }
    row.median = median_of(counted);
    for (std::size_t i = 0; i < longest; ++i) {
      std::vector<double> at;
      for (const auto& r : runs) at.push_back(i < r.size() ? r[i] : r.back());  // a shorter run keeps its best
      row.median_curve.push_back(median_of(at));
    }
    c.rows.push_back(std::move(row));
  }
  return c;
}

}  // namespace mls::kernels::tune
