// The SVG writer of the toolkit's plots (see mls/common/svg.hpp) and the one XML escaper.
#include "mls/common/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mls/common/error.hpp"

namespace mls {

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace svg {

std::string number(double v, std::string_view what) {
  MLS_CHECK(std::isfinite(v), "svg: ", what, " = ", v, " is not a finite number");
  char b[400];
  std::snprintf(b, sizeof b, "%.2f", v);
  std::string s(b);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s == "-0" ? "0" : s;
}

// ---- scales ----------------------------------------------------------------------------------

Scale::Scale(double lo_, double hi_, double px_lo_, double px_hi_, Kind kind_)
    : lo(lo_), hi(hi_), px_lo(px_lo_), px_hi(px_hi_), kind(kind_) {
  MLS_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo < hi, "svg: scale: the range [", lo, ", ", hi,
            "] is empty or not finite, expected lo < hi");
  MLS_CHECK(std::isfinite(px_lo) && std::isfinite(px_hi) && px_lo != px_hi, "svg: scale: the pixel range [",
            px_lo, ", ", px_hi, "] is empty or not finite");
  MLS_CHECK(kind == Linear || lo > 0, "svg: scale: a log scale needs a range above 0, got [", lo, ", ", hi, "]");
}

double Scale::operator()(double v) const {
  const double f = kind == Linear ? (v - lo) / (hi - lo) : (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
  return px_lo + f * (px_hi - px_lo);
}

std::vector<double> Scale::ticks(int target) const {
  std::vector<double> out;
  if (kind == Log) {
    const int e0 = static_cast<int>(std::ceil(std::log10(lo) - 1e-9));
    const int e1 = static_cast<int>(std::floor(std::log10(hi) + 1e-9));
    const bool fine = e1 - e0 < 2;  // under two decades: 1, 2 and 5 times each power of ten
    for (int e = e0 - 1; e <= e1; ++e) {
      for (double m : {1.0, 2.0, 5.0}) {
        if (!fine && m != 1.0) continue;
        const double t = m * std::pow(10.0, e);
        if (t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9)) out.push_back(t);
      }
    }
    return out;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / p < 1.5 ? p : raw / p < 3.5 ? 2 * p : raw / p < 7.5 ? 5 * p : 10 * p;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * step; k += 1) {
    const double t = k * step;
    out.push_back(std::abs(t) < 1e-12 * step ? 0.0 : t);
  }
  return out;
}

// ---- the document ----------------------------------------------------------------------------

Document::Document(double width, double height, const DocumentStyle& style)
    : width_(width), height_(height), style_(style) {
  MLS_CHECK(std::isfinite(width) && std::isfinite(height) && width > 0 && height > 0,
            "svg: a document of ", width, " x ", height, " pixels, expected a positive finite size");
  MLS_CHECK(style.quote == '\'' || style.quote == '"', "svg: the attribute quote must be ' or \"");
  MLS_CHECK(style.font_size >= 0 && std::isfinite(style.font_size), "svg: font size ", style.font_size);
}

namespace {

/// Appends ` name='value'` (value escaped) with the quote `q`.
void put_attr(std::string& out, char q, std::string_view name, std::string_view value) {
  out += ' ';
  out += name;
  out += '=';
  out += q;
  out += xml_escape(value);
  out += q;
}

}  // namespace

void Document::attr(std::string_view name, std::string_view value) { put_attr(body_, style_.quote, name, value); }

void Document::open(std::string_view tag, const Style& s) {
  body_ += '<';
  body_ += tag;
  if (!s.cls.empty()) attr("class", s.cls);
}

void Document::close(std::string_view tag, const Style& s) {
  if (!s.fill.empty()) attr("fill", s.fill);
  if (!s.stroke.empty()) attr("stroke", s.stroke);
  if (s.stroke_width > 0) attr("stroke-width", number(s.stroke_width, "stroke-width"));
  if (!s.dash.empty()) attr("stroke-dasharray", s.dash);
  for (const Attr& a : s.extra) attr(a.name, a.value);
  if (s.title.empty()) {
    body_ += "/>\n";
    return;
  }
  body_ += "><title>" + xml_escape(s.title) + "</title></";
  body_ += tag;
  body_ += ">\n";
}

Document& Document::line(double x1, double y1, double x2, double y2, const Style& s) {
  open("line", s);
  attr("x1", number(x1, "line x1"));
  attr("y1", number(y1, "line y1"));
  attr("x2", number(x2, "line x2"));
  attr("y2", number(y2, "line y2"));
  close("line", s);
  return *this;
}

Document& Document::rect(double x, double y, double w, double h, const Style& s) {
  MLS_CHECK(w >= 0 && h >= 0, "svg: rect of ", w, " x ", h, ", expected a size >= 0");
  open("rect", s);
  attr("x", number(x, "rect x"));
  attr("y", number(y, "rect y"));
  attr("width", number(w, "rect width"));
  attr("height", number(h, "rect height"));
  close("rect", s);
  return *this;
}

Document& Document::circle(double cx, double cy, double r, const Style& s) {
  MLS_CHECK(r >= 0, "svg: circle of radius ", r, ", expected >= 0");
  open("circle", s);
  attr("cx", number(cx, "circle cx"));
  attr("cy", number(cy, "circle cy"));
  attr("r", number(r, "circle r"));
  close("circle", s);
  return *this;
}

Document& Document::polyline(const std::vector<Point>& points, const Style& s) {
  if (points.empty()) return *this;
  std::string pts;
  for (const Point& p : points) {
    if (!pts.empty()) pts += ' ';
    pts += number(p.x, "polyline x") + "," + number(p.y, "polyline y");
  }
  open("polyline", s);
  attr("points", pts);
  if (s.fill.empty()) attr("fill", "none");
  close("polyline", s);
  return *this;
}

Document& Document::text(double x, double y, std::string_view text, const TextStyle& t) {
  body_ += "<text";
  attr("x", number(x, "text x"));
  attr("y", number(y, "text y"));
  if (t.anchor != Anchor::Start) attr("text-anchor", t.anchor == Anchor::Middle ? "middle" : "end");
  if (t.size > 0) attr("font-size", number(t.size, "font-size"));
  if (!t.weight.empty()) attr("font-weight", t.weight);
  if (!t.fill.empty()) attr("fill", t.fill);
  if (t.rotate != 0)
    attr("transform", "rotate(" + number(t.rotate, "rotation") + " " + number(x) + " " + number(y) + ")");
  body_ += '>';
  body_ += xml_escape(text);
  body_ += "</text>\n";
  return *this;
}

Document& Document::arrowhead(std::string_view id, std::string_view colour) {
  body_ += "<defs><marker";
  attr("id", id);
  attr("viewBox", "0 0 10 10");
  attr("refX", "10");
  attr("refY", "5");
  attr("markerWidth", "7");
  attr("markerHeight", "7");
  attr("orient", "auto-start-reverse");
  body_ += "><path";
  attr("d", "M 0 0 L 10 5 L 0 10 z");
  attr("fill", colour);
  body_ += "/></marker></defs>\n";
  return *this;
}

namespace {

std::string default_label(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace

Document& Document::x_axis(const Scale& x, double y, const AxisStyle& a) {
  const Style ink{.stroke = a.colour};
  if (a.line) line(x.px_lo, y, x.px_hi, y, ink);
  const double gap = a.label_gap > 0 ? a.label_gap : a.tick_out + 11;
  for (const double t : a.ticks.empty() ? x.ticks() : a.ticks) {
    const double px = x(t);
    if (!a.grid.empty()) line(px, a.grid_to, px, y, {.stroke = a.grid});
    if (a.tick_in + a.tick_out > 0) line(px, y - a.tick_in, px, y + a.tick_out, ink);
    text(px, y + gap, a.label ? a.label(t) : default_label(t), {.anchor = Anchor::Middle, .size = a.font_size});
  }
  if (!a.title.empty()) text((x.px_lo + x.px_hi) / 2, y + a.title_gap, a.title, {.anchor = Anchor::Middle});
  return *this;
}

Document& Document::y_axis(const Scale& y, double x, const AxisStyle& a) {
  const Style ink{.stroke = a.colour};
  if (a.line) line(x, y.px_lo, x, y.px_hi, ink);
  const double gap = a.label_gap > 0 ? a.label_gap : a.tick_out + 3;
  for (const double t : a.ticks.empty() ? y.ticks() : a.ticks) {
    const double py = y(t);
    if (!a.grid.empty()) line(x, py, a.grid_to, py, {.stroke = a.grid});
    if (a.tick_in + a.tick_out > 0) line(x - a.tick_out, py, x + a.tick_in, py, ink);
    text(x - gap, py + 4, a.label ? a.label(t) : default_label(t), {.anchor = Anchor::End, .size = a.font_size});
  }
  if (!a.title.empty())
    text(x - a.title_gap, (y.px_lo + y.px_hi) / 2, a.title, {.anchor = Anchor::Middle, .rotate = -90});
  return *this;
}

Document& Document::legend(double x, double y, const std::vector<LegendEntry>& entries, const LegendStyle& l) {
  const double size = l.font_size > 0 ? l.font_size : style_.font_size;
  for (const LegendEntry& e : entries) {
    switch (e.marker) {
      case LegendEntry::Line: line(x, y - 4, x + 20, y - 4, {.stroke = e.colour, .stroke_width = 2, .dash = e.dash}); break;
      case LegendEntry::Box: rect(x + 3, y - 9, 14, 10, {.fill = e.colour, .stroke = e.outline}); break;
      case LegendEntry::Dot: circle(x + 10, y - 4, 3, {.fill = e.colour}); break;
      case LegendEntry::None: break;
    }
    text(x + 24, y, e.label, {.size = l.font_size});
    if (l.horizontal)
      x += 24 + 0.6 * size * static_cast<double>(e.label.size()) + l.row;  // about 0.6 em a character
    else
      y += l.row;
  }
  return *this;
}

std::string Document::str() const {
  const char q = style_.quote;
  std::string out = "<svg";
  put_attr(out, q, "xmlns", "http://www.w3.org/2000/svg");
  put_attr(out, q, "width", number(width_));
  put_attr(out, q, "height", number(height_));
  if (!style_.font_family.empty()) put_attr(out, q, "font-family", style_.font_family);
  if (style_.font_size > 0) put_attr(out, q, "font-size", number(style_.font_size));
  out += ">\n";
  if (!style_.background.empty()) {
    out += "<rect";
    put_attr(out, q, "width", "100%");
    put_attr(out, q, "height", "100%");
    put_attr(out, q, "fill", style_.background);
    out += "/>\n";
  }
  out += body_;
  out += "</svg>\n";
  return out;
}

}  // namespace svg
}  // namespace mls
