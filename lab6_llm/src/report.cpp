// Lab 6: loss curves (CSV, SVG) and the loss of a token stream.
#include "mls/llm/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/common/svg.hpp"
#include "mls/common/file.hpp"
#include "mls/llm/data.hpp"

namespace mls::llm {

void write_loss_csv(const std::string& path, const std::vector<LossRow>& rows) {
  std::ostringstream o;
  o << "step,train_loss,val_loss,lr,grad_norm,tokens_per_s\n";
  char buf[256];
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "%lld,%.9g,", static_cast<long long>(r.step), r.train_loss);
    o << buf;
    if (r.val_loss >= 0) {
      std::snprintf(buf, sizeof buf, "%.9g", r.val_loss);
      o << buf;
    }
    std::snprintf(buf, sizeof buf, ",%.6g,%.6g,%.1f\n", r.lr, r.grad_norm, r.tokens_per_s);
    o << buf;
  }
  write_file_atomic(path, o.str(), "write_loss_csv");
}

std::vector<LossRow> read_loss_csv(const std::string& path) {
  std::istringstream in(read_file(path, "read_loss_csv"));
  std::string line;
  std::vector<LossRow> rows;
  std::getline(in, line);
  MLS_CHECK(line.rfind("step,train_loss", 0) == 0, "read_loss_csv: ", path,
            " does not start with the header 'step,train_loss,...'");
  int n = 1;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ls(line);
    std::string x;
    while (std::getline(ls, x, ',')) f.push_back(x);
    MLS_CHECK(f.size() >= 5, "read_loss_csv: ", path, " line ", n, " has ", f.size(),
              " fields, expected 6");
    try {
      LossRow r;
      r.step = std::stoll(f[0]);
      r.train_loss = std::stod(f[1]);
      r.val_loss = f[2].empty() ? -1 : std::stod(f[2]);
      r.lr = std::stod(f[3]);
      r.grad_norm = std::stod(f[4]);
      r.tokens_per_s = f.size() > 5 ? std::stod(f[5]) : 0;
      rows.push_back(r);
    } catch (const std::exception&) {
      fail("read_loss_csv: ", path, " line ", n, " is not numbers: '", line, "'");
    }
  }
  return rows;
}

namespace {

/// The frame of a plot over training steps (loss.svg, moe.svg): the title, the step axis below
/// and the y axis with grid lines, its numbers printed with `fmt`.
struct PlotBox {
  double W, H, ml, mr, mb;
};
void step_axes(svg::Document& d, const svg::Scale& X, const svg::Scale& Y, const PlotBox& b, const std::string& title,
               const char* y_title, const char* fmt) {
  d.text(b.W / 2, 22, title, {.anchor = svg::Anchor::Middle, .size = 14});
  d.x_axis(X, b.H - b.mb,
           {.label = [](double v) { return std::to_string(std::llround(v)); }, .title = "step", .title_gap = b.mb - 10});
  d.y_axis(Y, b.ml,
           {.label = [fmt](double v) {
              char buf[32];
              std::snprintf(buf, sizeof buf, fmt, v);
              return std::string(buf);
            },
            .grid = "#ddd", .grid_to = b.W - b.mr, .title = y_title, .title_gap = b.ml - 15});
}

}  // namespace

std::string loss_svg(const std::vector<LossRow>& rows, const std::string& title) {
  const double W = 640, H = 400, ml = 70, mr = 20, mt = 40, mb = 50;
  auto has_val = [](const LossRow& r) { return r.val_loss >= 0 && std::isfinite(r.val_loss); };
  double x0 = 0, x1 = 1, y0 = 1e300, y1 = -1e300;
  if (!rows.empty()) {
    x0 = static_cast<double>(rows.front().step);
    x1 = std::max(x0 + 1, static_cast<double>(rows.back().step));
  }
  for (const auto& r : rows) {
    if (std::isfinite(r.train_loss)) y0 = std::min(y0, r.train_loss), y1 = std::max(y1, r.train_loss);
    if (has_val(r)) y0 = std::min(y0, r.val_loss), y1 = std::max(y1, r.val_loss);
  }
  if (y0 > y1) y0 = 0, y1 = 1;  // no finite loss at all: an empty plot
  if (!(y1 > y0)) y0 -= 0.5, y1 += 0.5;
  y0 = std::max(0.0, y0 - 0.05 * (y1 - y0));
  const svg::Scale X(x0, x1, ml, W - mr), Y(y0, y1, H - mb, mt);
  svg::Document d(W, H);
  step_axes(d, X, Y, {W, H, ml, mr, mb}, title, "loss (nats/token)", "%.5g");
  std::vector<svg::Point> train;
  for (const auto& r : rows)
    if (std::isfinite(r.train_loss)) train.push_back({X(static_cast<double>(r.step)), Y(r.train_loss)});
  d.polyline(train, {.stroke = "#1f77b4", .stroke_width = 1.5});
  for (const auto& r : rows)
    if (has_val(r)) d.circle(X(static_cast<double>(r.step)), Y(r.val_loss), 3, {.fill = "#d62728"});
  d.legend(W - mr - 130, mt + 14,
           {{"train", "#1f77b4", svg::LegendEntry::Line}, {"validation", "#d62728", svg::LegendEntry::Dot}},
           {.row = 18});
  return d.str();
}

void write_loss_svg(const std::string& path, const std::vector<LossRow>& rows,
                    const std::string& title) {
  write_file_atomic(path, loss_svg(rows, title), "write_loss_svg");
}

MoeRow moe_row(std::int64_t step, const std::vector<MoeBlockStats>& blocks) {
  MoeRow m;
  m.step = step;
  for (const MoeBlockStats& b : blocks) {
    if (m.tokens.empty()) m.tokens.assign(b.tokens.size(), 0);
    MLS_CHECK(b.tokens.size() == m.tokens.size(), "moe_row: blocks of ", m.tokens.size(), " and ",
              b.tokens.size(), " experts");
    for (std::size_t e = 0; e < b.tokens.size(); ++e) m.tokens[e] += b.tokens[e];
    m.choices += b.choices;
    m.dropped += b.dropped;
    m.balance_loss += b.balance_loss;
  }
  return m;
}

void write_moe_csv(const std::string& path, const std::vector<MoeRow>& rows) {
  std::string out = "step,dropped_fraction,balance_loss";
  const std::size_t E = rows.empty() ? 0 : rows.front().tokens.size();
  for (std::size_t e = 0; e < E; ++e) out += ",tokens_e" + std::to_string(e);
  out += "\n";
  char buf[64];
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "%lld,%.6g,%.6g", (long long)r.step, r.dropped_fraction(), r.balance_loss);
    out += buf;
    for (auto t : r.tokens) out += "," + std::to_string(t);
    out += "\n";
  }
  write_file_atomic(path, out, "write_moe_csv");
}

std::string moe_svg(const std::vector<MoeRow>& rows, const std::string& title) {
  const double W = 800, H = 400, ml = 70, mr = 170, mt = 40, mb = 50;  // the legend on the right
  const std::size_t E = rows.empty() ? 0 : rows.front().tokens.size();
  double x0 = 0, x1 = 1, y1 = E > 0 ? 1.0 / static_cast<double>(E) : 1.0;
  if (!rows.empty()) {
    x0 = static_cast<double>(rows.front().step);
    x1 = std::max(x0 + 1, static_cast<double>(rows.back().step));
  }
  auto share = [](const MoeRow& r, std::size_t e) {
    std::int64_t kept = 0;
    for (auto t : r.tokens) kept += t;
    return kept > 0 ? static_cast<double>(r.tokens[e]) / static_cast<double>(kept) : 0.0;
  };
  for (const auto& r : rows) {
    for (std::size_t e = 0; e < r.tokens.size(); ++e) y1 = std::max(y1, share(r, e));
    y1 = std::max(y1, r.dropped_fraction());
  }
  y1 = std::min(1.0, y1 * 1.05);
  const svg::Scale X(x0, x1, ml, W - mr), Y(0.0, y1, H - mb, mt);
  svg::Document d(W, H);
  step_axes(d, X, Y, {W, H, ml, mr, mb}, title, "share of routed tokens", "%.3g");
  static const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  std::vector<svg::LegendEntry> legend;
  for (std::size_t e = 0; e < E; ++e) {
    std::vector<svg::Point> line;
    for (const auto& r : rows)
      if (r.tokens.size() == E) line.push_back({X(static_cast<double>(r.step)), Y(share(r, e))});
    d.polyline(line, {.stroke = colors[e % 10], .stroke_width = 1.5});
    if (e < 8) legend.push_back({"expert " + std::to_string(e), colors[e % 10], svg::LegendEntry::Line});
  }
  if (E > 0) {
    const double ideal = 1.0 / static_cast<double>(E);
    d.polyline({{X(x0), Y(ideal)}, {X(x1), Y(ideal)}}, {.stroke = "#999", .stroke_width = 1, .dash = "6,4"});
    legend.push_back({"ideal 1/E", "#999", svg::LegendEntry::Line, "6,4"});
  }
  std::vector<svg::Point> drop;
  for (const auto& r : rows) drop.push_back({X(static_cast<double>(r.step)), Y(r.dropped_fraction())});
  d.polyline(drop, {.stroke = "#000", .stroke_width = 1.5, .dash = "3,3"});
  legend.push_back({"dropped fraction", "#000", svg::LegendEntry::Line, "3,3"});
  d.legend(W - mr + 15, mt + 14, legend, {.row = 16});
  return d.str();
}

void write_moe_svg(const std::string& path, const std::vector<MoeRow>& rows, const std::string& title) {
  write_file_atomic(path, moe_svg(rows, title), "write_moe_svg");
}

double eval_stream_loss(const GPTParams& params, const std::vector<std::int32_t>& tokens,
                        std::int64_t B) {
  const GPTConfig& cfg = params.config();
  const std::int64_t n = static_cast<std::int64_t>(tokens.size());
  MLS_CHECK(n >= 2, "eval: a stream of ", n, " tokens, expected at least 2");
  MLS_CHECK(B > 0, "eval: batch = ", B, ", expected > 0");
  const std::int64_t T = std::min(cfg.block_size, n - 1);
  double sum = 0, count = 0;
  std::vector<std::int64_t> starts;
  for (std::int64_t s = 0; s + T < n; s += T) starts.push_back(s);
  GPTActivations acts(cfg, B, T);
  for (std::size_t i = 0; i < starts.size(); i += static_cast<std::size_t>(B)) {
    Batch b;
    b.B = B;
    b.T = T;
    const std::int64_t used =
        std::min<std::int64_t>(B, static_cast<std::int64_t>(starts.size() - i));
    for (std::int64_t r = 0; r < B; ++r) {
      const std::int64_t s = starts[i + static_cast<std::size_t>(std::min(r, used - 1))];
      for (std::int64_t t = 0; t < T; ++t) {
        b.inputs.push_back(tokens[s + t]);
        b.targets.push_back(tokens[s + t + 1]);
        b.mask.push_back(r < used ? 1.f : 0.f);
      }
    }
    const double l =
        gpt_forward(params, acts, b.inputs.data(), b.targets.data(), b.mask.data(), B, T);
    sum += l * static_cast<double>(used * T);
    count += static_cast<double>(used * T);
  }
  // the tail shorter than T + 1 tokens
  const std::int64_t tail = starts.empty() ? 0 : starts.back() + T;
  if (n - 1 - tail >= 1) {
    const std::int64_t t2 = n - 1 - tail;
    GPTActivations a2(cfg, 1, t2);
    std::vector<std::int32_t> in(tokens.begin() + tail, tokens.begin() + tail + t2),
        tg(tokens.begin() + tail + 1, tokens.end());
    sum += gpt_forward(params, a2, in.data(), tg.data(), nullptr, 1, t2) * static_cast<double>(t2);
    count += static_cast<double>(t2);
  }
  return sum / count;
}

}  // namespace mls::llm
