// Lab 6: loss curves (CSV, SVG) and the loss of a token stream.
#include "mls/llm/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/llm/checkpoint.hpp"
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
  std::istringstream in(read_binary_file(path, "read_loss_csv"));
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

/// Axis ticks at 1, 2 or 5 times a power of ten, about five of them, inside [lo, hi].
std::vector<double> nice_ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / p < 1.5 ? p : raw / p < 3.5 ? 2 * p : raw / p < 7.5 ? 5 * p : 10 * p;
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + 1e-9 * step; t += step) {
    ticks.push_back(std::abs(t) < 1e-12 * step ? 0.0 : t);
  }
  return ticks;
}

}  // namespace

std::string loss_svg(const std::vector<LossRow>& rows, const std::string& title) {
  const double W = 640, H = 400, ml = 70, mr = 20, mt = 40, mb = 50;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (!rows.empty()) {
    x0 = static_cast<double>(rows.front().step);
    x1 = std::max(x0 + 1, static_cast<double>(rows.back().step));
    y0 = 1e300;
    y1 = -1e300;
    for (const auto& r : rows) {
      if (std::isfinite(r.train_loss))
        y0 = std::min(y0, r.train_loss), y1 = std::max(y1, r.train_loss);
      if (r.val_loss >= 0 && std::isfinite(r.val_loss))
        y0 = std::min(y0, r.val_loss), y1 = std::max(y1, r.val_loss);
    }
    if (!(y1 > y0)) y0 -= 0.5, y1 += 0.5;
    y0 = std::max(0.0, y0 - 0.05 * (y1 - y0));
  }
  auto X = [&](double x) { return ml + (x - x0) / (x1 - x0) * (W - ml - mr); };
  auto Y = [&](double y) { return H - mb - (y - y0) / (y1 - y0) * (H - mt - mb); };
  std::ostringstream s;
  s.precision(5);
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
       "fill='white'/>\n";
  s << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='14'>" << title
    << "</text>\n";
  s << "<line x1='" << ml << "' y1='" << H - mb << "' x2='" << W - mr << "' y2='" << H - mb
    << "' stroke='black'/>\n";
  s << "<line x1='" << ml << "' y1='" << mt << "' x2='" << ml << "' y2='" << H - mb
    << "' stroke='black'/>\n";
  for (const double xv : nice_ticks(x0, x1)) {
    s << "<line x1='" << X(xv) << "' y1='" << H - mb << "' x2='" << X(xv) << "' y2='" << H - mb + 5
      << "' stroke='black'/>"
      << "<text x='" << X(xv) << "' y='" << H - mb + 18 << "' text-anchor='middle'>"
      << std::llround(xv) << "</text>\n";
  }
  for (const double yv : nice_ticks(y0, y1)) {
    s << "<line x1='" << ml - 5 << "' y1='" << Y(yv) << "' x2='" << W - mr << "' y2='" << Y(yv)
      << "' stroke='#ddd'/><text x='" << ml - 8 << "' y='" << Y(yv) + 4 << "' text-anchor='end'>"
      << yv << "</text>\n";
  }
  s << "<text x='" << (ml + W - mr) / 2 << "' y='" << H - 10
    << "' text-anchor='middle'>step</text>\n";
  s << "<text x='15' y='" << (mt + H - mb) / 2 << "' text-anchor='middle' transform='rotate(-90 15 "
    << (mt + H - mb) / 2 << ")'>loss (nats/token)</text>\n";
  s << "<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='";
  for (const auto& r : rows)
    if (std::isfinite(r.train_loss))
      s << X(static_cast<double>(r.step)) << "," << Y(r.train_loss) << " ";
  s << "'/>\n";
  for (const auto& r : rows)
    if (r.val_loss >= 0 && std::isfinite(r.val_loss))
      s << "<circle cx='" << X(static_cast<double>(r.step)) << "' cy='" << Y(r.val_loss)
        << "' r='3' fill='#d62728'/>\n";
  s << "<line x1='" << W - mr - 130 << "' y1='" << mt + 10 << "' x2='" << W - mr - 110 << "' y2='"
    << mt + 10 << "' stroke='#1f77b4' stroke-width='2'/><text x='" << W - mr - 105 << "' y='"
    << mt + 14 << "'>train</text>\n";
  s << "<circle cx='" << W - mr - 120 << "' cy='" << mt + 28 << "' r='3' fill='#d62728'/><text x='"
    << W - mr - 105 << "' y='" << mt + 32 << "'>validation</text>\n</svg>\n";
  return s.str();
}

void write_loss_svg(const std::string& path, const std::vector<LossRow>& rows,
                    const std::string& title) {
  write_file_atomic(path, loss_svg(rows, title), "write_loss_svg");
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
