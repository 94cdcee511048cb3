#pragma once
/// A small SVG writer for the toolkit's plots (the roofline, the pipeline schedule, the collective
/// traces, the loss curve, the memory timeline): lines, polylines, rects, circles, text, axes with
/// ticks on linear and log scales, a legend. Every text and attribute value goes through
/// xml_escape, the one place that escapes for XML and HTML (the grader's reports use it too);
/// every coordinate is checked to be finite, so a NaN never reaches a picture silently.
///
///   svg::Document d(640, 400);
///   const svg::Scale x(0, 100, 70, 620), y(0, 5, 350, 40);          // data -> pixels
///   d.x_axis(x, 350, {.title = "step"}).y_axis(y, 70, {.grid = "#ddd", .grid_to = 620});
///   d.polyline({{x(0), y(4.2)}, {x(100), y(1.3)}}, {.stroke = "#1f77b4", .stroke_width = 1.5});
///   d.legend(500, 50, {{"train", "#1f77b4"}});
///   write_file_atomic("loss.svg", d.str());
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mls {

/// Escapes & < > " ' (as &amp; &lt; &gt; &quot; &#39;) for XML/HTML text and attribute values.
std::string xml_escape(std::string_view s);

namespace svg {

/// A coordinate as written: at most two decimals, trailing zeros dropped ("12.5", "3", "-0.25").
/// A value that is not finite is an mls::Error naming `what`.
std::string number(double v, std::string_view what = "a coordinate");

/// One more attribute of an element (data-*, rx, marker-end...); numbers are checked and formatted
/// like coordinates.
struct Attr {
  std::string name, value;
  Attr(std::string_view n, std::string_view v) : name(n), value(v) {}
  Attr(std::string_view n, const char* v) : name(n), value(v) {}
  Attr(std::string_view n, const std::string& v) : name(n), value(v) {}
  Attr(std::string_view n, double v) : name(n), value(number(v, n)) {}
  Attr(std::string_view n, int v) : name(n), value(std::to_string(v)) {}
};
using Attrs = std::vector<Attr>;

/// How a shape is painted; empty texts and zero widths are left out (SVG's defaults apply, except
/// that a polyline is not filled unless `fill` says so).
struct Style {
  std::string cls{};          // the class attribute, written first
  std::string fill{};
  std::string stroke{};
  double stroke_width = 0;
  std::string dash{};         // stroke-dasharray, e.g. "8,4"
  Attrs extra{};              // written after the others, in order
  std::string title{};        // a tooltip: a <title> child
};

enum class Anchor { Start, Middle, End };

struct TextStyle {
  Anchor anchor = Anchor::Start;
  double size = 0;          // font-size; 0: the document's
  std::string fill{};
  std::string weight{};       // font-weight, e.g. "bold"
  double rotate = 0;        // degrees, about the text's (x, y)
};

struct Point {
  double x, y;
};

/// Maps data values in [lo, hi] onto pixels [px_lo, px_hi] (px_hi < px_lo for a y axis that grows
/// upwards), linearly or by log10. An empty or non-finite range, or a log range that does not lie
/// above 0, is an mls::Error.
class Scale {
 public:
  enum Kind { Linear, Log };
  Scale(double lo, double hi, double px_lo, double px_hi, Kind kind = Linear);
  double operator()(double v) const;
  /// Tick values inside [lo, hi]. Linear: multiples of 1, 2 or 5 times a power of ten, about
  /// `target` of them. Log: every power of ten, or 1-2-5 steps where the range spans under two
  /// decades.
  std::vector<double> ticks(int target = 5) const;
  double lo, hi, px_lo, px_hi;
  Kind kind;
};

/// An axis: a line, tick marks, tick labels, optional grid lines across the plot and a title.
struct AxisStyle {
  std::vector<double> ticks{};                 // data values; empty: scale.ticks()
  std::function<std::string(double)> label{};  // a tick's text; empty: printf "%g"
  double tick_out = 5, tick_in = 0;          // tick mark lengths out of and into the plot
  bool line = true;                          // draw the axis line
  std::string colour = "black";
  std::string grid{};                          // grid line colour; empty: no grid
  double grid_to = 0;                        // where grid lines end: a y (x axis) or x (y axis)
  double label_gap = 0;                      // axis to tick label; 0: tick_out + 11 (x), + 3 (y)
  double font_size = 0;                      // tick labels; 0: the document's
  std::string title{};
  double title_gap = 34;                     // axis to its title (a y axis title is rotated)
};

/// A legend row: a marker in `colour` and a label.
struct LegendEntry {
  enum Marker { Line, Box, Dot, None };
  std::string label{};
  std::string colour{};
  Marker marker = Line;
  std::string dash{};     // a Line marker's stroke-dasharray
  std::string outline{};  // a Box marker's stroke
};

struct LegendStyle {
  bool horizontal = false;  // rows (false) or one line of entries
  double row = 14;          // row height, or the gap between horizontal entries
  double font_size = 0;     // 0: the document's
};

struct DocumentStyle {
  std::string font_family = "sans-serif";
  double font_size = 12;
  std::string background = "white";  // empty: transparent
  char quote = '\'';                  // the attribute quote: ' or "
};

/// An SVG document of `width` x `height` pixels; each call appends one element (or a few) on a
/// line of its own, and str() returns the whole document.
class Document {
 public:
  Document(double width, double height, const DocumentStyle& style = {});

  Document& line(double x1, double y1, double x2, double y2, const Style& s = {});
  Document& rect(double x, double y, double w, double h, const Style& s = {});
  Document& circle(double cx, double cy, double r, const Style& s = {});
  /// Nothing is drawn for an empty list.
  Document& polyline(const std::vector<Point>& points, const Style& s = {});
  Document& text(double x, double y, std::string_view text, const TextStyle& t = {});
  /// An arrowhead for `marker-end='url(#id)'`, in `colour`.
  Document& arrowhead(std::string_view id, std::string_view colour);
  /// A horizontal axis at pixel row `y`, and a vertical one at pixel column `x`.
  Document& x_axis(const Scale& x, double y, const AxisStyle& a = {});
  Document& y_axis(const Scale& y, double x, const AxisStyle& a = {});
  /// A legend whose first entry's text baseline is at (x + 24, y).
  Document& legend(double x, double y, const std::vector<LegendEntry>& entries, const LegendStyle& l = {});

  double width() const { return width_; }
  double height() const { return height_; }
  /// The document, closed.
  std::string str() const;

 private:
  void open(std::string_view tag, const Style& s);
  void attr(std::string_view name, std::string_view value);
  void close(std::string_view tag, const Style& s);
  double width_, height_;
  DocumentStyle style_;
  std::string body_;
};

}  // namespace svg
}  // namespace mls
