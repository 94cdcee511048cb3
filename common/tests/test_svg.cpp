// Tests of the SVG writer and the XML escaper (common/src/svg.cpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/svg.hpp"
#include "mls/testing.hpp"

namespace svg = mls::svg;
using mls::testing::observe;
using mls::testing::require_error;

namespace {

/// True when every '&' in `text` starts one of the five entities we write.
bool entities_ok(const std::string& text) {
  for (std::size_t i = text.find('&'); i != std::string::npos; i = text.find('&', i + 1)) {
    bool ok = false;
    for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&#39;"}) ok = ok || text.compare(i, std::strlen(e), e) == 0;
    if (!ok) return false;
  }
  return true;
}

/// Checks that `doc` is well formed in the subset we write: every tag is closed in order, no raw
/// '<' or '&' outside tags and entities, attribute values hold no raw quotes or '<'. Returns the
/// first problem, or "" when there is none.
std::string well_formed(const std::string& doc) {
  std::vector<std::string> open;
  for (std::size_t i = 0; i < doc.size();) {
    if (doc[i] != '<') {
      if (doc[i] == '&' && !entities_ok(doc.substr(i, 6))) return "bad entity at " + std::to_string(i);
      if (doc[i] == '>') return "raw '>' at " + std::to_string(i);
      ++i;
      continue;
    }
    const bool closing = doc[i + 1] == '/';
    std::size_t j = i + (closing ? 2 : 1);
    const std::size_t name_end = doc.find_first_of(" />", j);
    const std::string name = doc.substr(j, name_end - j);
    // Scan attributes: quoted values may not hold '<' or their own quote.
    j = name_end;
    while (j < doc.size() && doc[j] != '>') {
      if (doc[j] == '\'' || doc[j] == '"') {
        const auto q = doc.find(doc[j], j + 1);
        if (q == std::string::npos) return "unterminated attribute in <" + name + ">";
        const std::string value = doc.substr(j + 1, q - j - 1);
        if (value.find('<') != std::string::npos || !entities_ok(value)) return "raw '<' or '&' in an attribute";
        j = q + 1;
        continue;
      }
      if (doc[j] == '<') return "'<' inside the tag <" + name + ">";
      ++j;
    }
    if (j >= doc.size()) return "unterminated tag <" + name + ">";
    const bool self_closing = doc[j - 1] == '/';
    if (closing) {
      if (open.empty() || open.back() != name) return "</" + name + "> closes " + (open.empty() ? "nothing" : open.back());
      open.pop_back();
    } else if (!self_closing) {
      open.push_back(name);
    }
    i = j + 1;
  }
  return open.empty() ? "" : "<" + open.back() + "> is never closed";
}

}  // namespace

TEST_CASE("svg: xml_escape escapes the five special characters", "[common][svg]") {
  observe("escaped", mls::xml_escape("a<b>&\"c'd"));
  CHECK(mls::xml_escape("a<b>&\"c'd") == "a&lt;b&gt;&amp;&quot;c&#39;d");
  CHECK(mls::xml_escape("plain text, é") == "plain text, é");
  CHECK(mls::xml_escape("") == "");
}

TEST_CASE("svg: text and attribute values are escaped, the document is well formed", "[common][svg]") {
  for (const char quote : {'\'', '"'}) {
    svg::Document d(200, 100, {.quote = quote});
    const std::string hostile = "<script>alert(\"x\" & 'y')</script>";
    d.text(10, 20, hostile, {.anchor = svg::Anchor::Middle, .rotate = -90});
    d.rect(1, 2, 3, 4, {.cls = hostile, .fill = "red", .extra = {{"data-x", hostile}}, .title = hostile});
    d.line(0, 0, 10, 10, {.stroke = "#000", .title = "a & b"});
    d.circle(5, 5, 2, {.fill = "'\""});
    d.polyline({{0, 0}, {1, 1}}, {.stroke = "blue"});
    d.arrowhead("arr'ow", "#123");
    d.legend(10, 10, {{"a<b", "red"}, {"c&d", "blue", svg::LegendEntry::Box}, {"e", "green", svg::LegendEntry::Dot}});
    const std::string doc = d.str();
    observe(std::string("document quoted with ") + quote, doc);
    CHECK(doc.rfind("<svg xmlns=", 0) == 0);
    CHECK(doc.size() >= 7);
    CHECK(doc.substr(doc.size() - 7) == "</svg>\n");
    CHECK(well_formed(doc) == "");
    CHECK(doc.find("<script>") == std::string::npos);
    CHECK(doc.find("&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;") != std::string::npos);
    CHECK(doc.find("<title>a &amp; b</title></line>") != std::string::npos);
    CHECK(doc.find("transform=" + std::string(1, quote) + "rotate(-90 10 20)") != std::string::npos);
  }
  // The checker itself catches what it should.
  CHECK(well_formed("<svg><text>a<b</text></svg>") != "");
  CHECK(well_formed("<svg><g></svg>") != "");
  CHECK(well_formed("<svg x='a&b'/>") != "");
}

TEST_CASE("svg: numbers are written with at most two decimals", "[common][svg]") {
  CHECK(svg::number(3) == "3");
  CHECK(svg::number(12.5) == "12.5");
  CHECK(svg::number(-0.25) == "-0.25");
  CHECK(svg::number(1.0 / 3) == "0.33");
  CHECK(svg::number(-0.001) == "0");
  observe("numbers", svg::number(2.675) + " " + svg::number(1e6));
  CHECK(svg::number(1e6) == "1000000");
}

TEST_CASE("svg: linear scales map and tick at 1, 2, 5 times a power of ten", "[common][svg]") {
  const svg::Scale x(0, 300, 70, 620);
  CHECK(x(0) == Approx(70));
  CHECK(x(300) == Approx(620));
  CHECK(x(150) == Approx(345));
  observe("ticks 0..300", x.ticks());
  CHECK(x.ticks() == std::vector<double>{0, 50, 100, 150, 200, 250, 300});
  const svg::Scale y(0.37, 2.46, 350, 40);  // y grows upwards
  CHECK(y(0.37) == Approx(350));
  CHECK(y(2.46) == Approx(40));
  const auto t = y.ticks();
  observe("ticks 0.37..2.46", t);
  CHECK(t == std::vector<double>{0.5, 1.0, 1.5, 2.0});
  const auto neg = svg::Scale(-1, 1, 0, 100).ticks(4);
  observe("ticks -1..1", neg);
  CHECK(neg == std::vector<double>{-1, -0.5, 0, 0.5, 1});
  // An axis draws a tick mark and a label at each tick, at the scale's pixel.
  svg::Document d(700, 400);
  d.x_axis(x, 350, {.title = "step"});
  const std::string doc = d.str();
  CHECK(doc.find("<line x1='345' y1='350' x2='345' y2='355' stroke='black'/>") != std::string::npos);
  CHECK(doc.find("<text x='345' y='366' text-anchor='middle'>150</text>") != std::string::npos);
  CHECK(doc.find(">step</text>") != std::string::npos);
  CHECK(well_formed(doc) == "");
}

TEST_CASE("svg: log scales tick at powers of ten, or 1-2-5 over a short range", "[common][svg]") {
  const svg::Scale x(0.01, 1000, 70, 740, svg::Scale::Log);
  CHECK(x(0.01) == Approx(70));
  CHECK(x(1000) == Approx(740));
  CHECK(x(1) == Approx(70 + 670 * 2.0 / 5));
  const auto t = x.ticks();
  observe("ticks 0.01..1000", t);
  REQUIRE(t.size() == 6);
  for (std::size_t i = 0; i < t.size(); ++i) CHECK(t[i] == Approx(std::pow(10.0, static_cast<double>(i) - 2)));
  const auto fine = svg::Scale(3, 200, 0, 100, svg::Scale::Log).ticks();
  observe("ticks 3..200", fine);
  REQUIRE(fine.size() == 6);
  const std::vector<double> want{5, 10, 20, 50, 100, 200};
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(fine[i] == Approx(want[i]));
  svg::Document d(800, 500);
  d.y_axis(svg::Scale(0.1, 1000, 450, 30, svg::Scale::Log), 70, {.grid = "#ddd", .grid_to = 740});
  const std::string doc = d.str();
  CHECK(doc.find("<line x1='70' y1='135' x2='740' y2='135' stroke='#ddd'/>") != std::string::npos);  // the 100 line
  CHECK(doc.find(">0.1</text>") != std::string::npos);
  CHECK(doc.find(">1000</text>") != std::string::npos);
}

TEST_CASE("svg: bad input is a clear mls::Error", "[common][svg]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  require_error([] { svg::Scale(1, 1, 0, 100); }, "svg: scale: the range [1, 1] is empty or not finite");
  require_error([] { svg::Scale(2, 1, 0, 100); }, "expected lo < hi");
  require_error([&] { svg::Scale(0, nan, 0, 100); }, "is empty or not finite");
  require_error([&] { svg::Scale(0, 1, 0, inf); }, "the pixel range");
  require_error([] { svg::Scale(0, 10, 0, 100, svg::Scale::Log); }, "a log scale needs a range above 0");
  require_error([] { svg::Document(0, 100); }, "expected a positive finite size");
  require_error([&] { svg::Document(nan, 100); }, "expected a positive finite size");
  svg::Document d(100, 100);
  require_error([&] { d.line(0, nan, 1, 1); }, "svg: line y1 = nan is not a finite number");
  require_error([&] { d.circle(inf, 0, 1); }, "svg: circle cx = inf is not a finite number");
  require_error([&] { d.polyline({{0, 0}, {1, nan}}); }, "svg: polyline y = nan");
  require_error([&] { d.text(nan, 0, "x"); }, "svg: text x = nan");
  require_error([&] { d.rect(0, 0, -1, 1); }, "svg: rect of -1 x 1");
  // A log scale maps 0 to -inf: drawing it is an error, not a silent NaN in the picture.
  const svg::Scale lg(1, 100, 0, 100, svg::Scale::Log);
  require_error([&] { d.circle(lg(0), 0, 1); }, "not a finite number");
}
