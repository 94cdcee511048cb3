// Tests of the Graphviz DOT writer (common/src/dot.cpp).

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "mls/common/dot.hpp"
#include "mls/common/error.hpp"
#include "mls/testing.hpp"

namespace {

using mls::testing::TempDir;

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

/// True if every '{' is closed by a later '}' (outside quoted strings).
bool balanced_braces(const std::string& s) {
  int depth = 0;
  bool in_quotes = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_quotes) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_quotes = false;
      }
      continue;
    }
    if (c == '"') in_quotes = true;
    if (c == '{') ++depth;
    if (c == '}' && --depth < 0) return false;
  }
  return depth == 0 && !in_quotes;
}

/// Sets an environment variable for a scope and restores it.
struct EnvGuard {
  std::string name;
  std::string saved;
  bool had;
  EnvGuard(const char* n, const char* value) : name(n) {
    const char* old = std::getenv(n);
    had = old != nullptr;
    if (had) saved = old;
    ::setenv(n, value, 1);
  }
  ~EnvGuard() {
    if (had) {
      ::setenv(name.c_str(), saved.c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
};

mls::DotGraph sample_graph() {
  mls::DotGraph g("forward", {{"rankdir", "LR"}});
  g.node("x", "input\n[2, 3]", {{"shape", "box"}});
  g.begin_cluster("layer1", "Linear");
  g.node("w", "weight");
  g.node("mm", "matmul");
  g.end_cluster();
  g.node("y", "output");
  g.edge("x", "mm", "[2, 3]");
  g.edge("w", "mm");
  g.edge("mm", "y", "", {{"color", "red"}});
  return g;
}

}  // namespace

TEST_CASE("dot: dot_quote escapes quotes, backslashes and newlines", "[common][dot]") {
  CHECK(mls::dot_quote("") == "\"\"");
  CHECK(mls::dot_quote("abc") == "\"abc\"");
  CHECK(mls::dot_quote("say \"hi\"") == "\"say \\\"hi\\\"\"");
  CHECK(mls::dot_quote("a\\b") == "\"a\\\\b\"");
  CHECK(mls::dot_quote("line1\nline2") == "\"line1\\nline2\"");
  CHECK(mls::dot_quote("crlf\r\nend") == "\"crlf\\nend\"");
  CHECK(mls::dot_quote("\\\"") == "\"\\\\\\\"\"");  // a backslash then a quote
}

TEST_CASE("dot: counts nodes and edges and writes valid structure", "[common][dot]") {
  const auto g = sample_graph();
  CHECK(g.num_nodes() == 4);
  CHECK(g.num_edges() == 3);
  const std::string s = g.str();
  CHECK(s.rfind("digraph \"forward\" {", 0) == 0);
  CHECK(s.back() == '\n');
  CHECK(s.substr(s.size() - 2) == "}\n");
  CHECK(balanced_braces(s));
  CHECK_THAT(s, Catch::Contains("rankdir=\"LR\";"));
  CHECK_THAT(s, Catch::Contains("\"x\" [label=\"input\\n[2, 3]\", shape=\"box\"];"));
  CHECK_THAT(s, Catch::Contains("\"x\" -> \"mm\" [label=\"[2, 3]\"];"));
  CHECK_THAT(s, Catch::Contains("\"w\" -> \"mm\";"));
  CHECK_THAT(s, Catch::Contains("\"mm\" -> \"y\" [color=\"red\"];"));
  CHECK(std::count(s.begin(), s.end(), '\n') == 13);
}

TEST_CASE("dot: clusters are subgraphs whose names start with cluster_", "[common][dot]") {
  const std::string s = sample_graph().str();
  const auto sub = s.find("subgraph \"cluster_layer1\" {");
  REQUIRE(sub != std::string::npos);
  CHECK(s.find("label=\"Linear\";", sub) != std::string::npos);
  // The cluster's nodes come after its opening line and before the node added after it.
  CHECK(s.find("\"w\" [label=\"weight\"]") > sub);
  CHECK(s.find("\"y\" [label=\"output\"]") > s.find("\"mm\" [label=\"matmul\"]"));

  SECTION("nested and unclosed clusters still give balanced braces") {
    mls::DotGraph g;
    g.begin_cluster("outer", "outer");
    g.begin_cluster("inner", "inner");
    g.node("a", "a");
    g.end_cluster();
    g.begin_cluster("open", "never closed");
    g.node("b", "b");
    const std::string t = g.str();
    CHECK(t.rfind("digraph \"G\" {", 0) == 0);
    CHECK(balanced_braces(t));
    CHECK(std::count(t.begin(), t.end(), '{') == 4);
  }
  SECTION("end_cluster without a cluster throws") {
    mls::DotGraph g("lonely");
    CHECK_THROWS_WITH(
        g.end_cluster(),
        Catch::Contains("DotGraph::end_cluster: no cluster is open in graph 'lonely'"));
  }
}

TEST_CASE("dot: ids and labels with special characters are escaped", "[common][dot]") {
  mls::DotGraph g("weird \"name\"");
  g.node("a\"b", "multi\nline \\ label", {{"tooltip", "q\"uote"}, {"odd key", "v"}});
  g.edge("a\"b", "c\\d", "e\"f");
  const std::string s = g.str();
  CHECK(s.rfind("digraph \"weird \\\"name\\\"\" {", 0) == 0);
  CHECK_THAT(s, Catch::Contains("\"a\\\"b\" [label=\"multi\\nline \\\\ label\", "
                                "tooltip=\"q\\\"uote\", \"odd key\"=\"v\"];"));
  CHECK_THAT(s, Catch::Contains("\"a\\\"b\" -> \"c\\\\d\" [label=\"e\\\"f\"];"));
  CHECK(balanced_braces(s));
}

TEST_CASE("dot: write and render_svg", "[common][dot]") {
  TempDir dir;
  const auto dot_path = dir.path / "g.dot";
  const auto g = sample_graph();
  g.write(dot_path.string());
  CHECK(slurp(dot_path) == g.str());

  SECTION("write to an impossible path throws naming it") {
    const std::string bad = (dir.path / "no" / "such" / "g.dot").string();
    CHECK_THROWS_WITH(g.write(bad), Catch::Contains("dot: cannot open '" + bad + "'"));
  }
  SECTION("render_svg with Graphviz installed") {
    if (std::system("command -v dot >/dev/null 2>&1") != 0) {
      WARN("SKIPPED: Graphviz 'dot' is not installed (apt-get install graphviz)");
      return;
    }
    const auto svg = dir.path / "g.svg";
    REQUIRE(mls::render_svg(dot_path.string(), svg.string()));
    const std::string text = slurp(svg);
    CHECK((text.rfind("<?xml", 0) == 0 || text.find("<svg") != std::string::npos));
    CHECK_THAT(text, Catch::Contains("matmul"));
  }
  SECTION("render_svg reports dot's failure") {
    if (std::system("command -v dot >/dev/null 2>&1") != 0) {
      WARN("SKIPPED: Graphviz 'dot' is not installed (apt-get install graphviz)");
      return;
    }
    const auto broken = dir.path / "broken.dot";
    std::ofstream(broken) << "digraph { this is not { valid";
    CHECK_THROWS_WITH(mls::render_svg(broken.string(), (dir.path / "b.svg").string()),
                      Catch::Contains("render_svg: 'dot -Tsvg " + broken.string()) &&
                          Catch::Contains("failed (exit status"));
    const std::string missing = (dir.path / "missing.dot").string();
    CHECK_THROWS_WITH(mls::render_svg(missing, (dir.path / "m.svg").string()),
                      Catch::Contains(missing));
  }
  SECTION("render_svg returns false and writes nothing without dot") {
    const auto svg = dir.path / "none.svg";
    EnvGuard path("PATH", dir.path.string().c_str());  // a PATH with no `dot` on it
    CHECK_FALSE(mls::render_svg(dot_path.string(), svg.string()));
    CHECK_FALSE(std::filesystem::exists(svg));
  }
}
