#pragma once
/// A small Graphviz DOT writer used to draw computation graphs (labs 2 and 3).
///
///   DotGraph g("forward");
///   g.node("n1", "add\n[2, 3]", {{"color", "blue"}});
///   g.edge("n0", "n1", "[2, 3]");
///   std::string text = g.str();     // digraph "forward" { ... }
#include <string>
#include <utility>
#include <vector>

namespace mls {

using DotAttrs = std::vector<std::pair<std::string, std::string>>;

class DotGraph {
 public:
  explicit DotGraph(std::string name = "G", DotAttrs graph_attrs = {});
  /// Adds a node; `label` may contain newlines. Ids and labels are escaped.
  void node(const std::string& id, const std::string& label, DotAttrs attrs = {});
  void edge(const std::string& from, const std::string& to, const std::string& label = "",
            DotAttrs attrs = {});
  /// Starts a named cluster (subgraph); nodes added until `end_cluster()` go in it.
  void begin_cluster(const std::string& name, const std::string& label);
  void end_cluster();
  std::size_t num_nodes() const { return num_nodes_; }
  std::size_t num_edges() const { return num_edges_; }
  /// The whole graph as DOT text.
  std::string str() const;
  /// Writes the DOT text to `path`; throws `mls::Error` if the file cannot be written.
  void write(const std::string& path) const;

 private:
  std::string name_;
  DotAttrs graph_attrs_;
  std::vector<std::string> lines_;
  int depth_ = 0;
  std::size_t num_nodes_ = 0, num_edges_ = 0;
};

/// Quotes a string for DOT: wraps in "..." and escapes quotes, backslashes and newlines.
std::string dot_quote(const std::string& s);

/// Renders a .dot file to SVG with Graphviz's `dot` if it is installed. Returns false (and
/// writes nothing) when `dot` is not available; throws `mls::Error` if `dot` fails.
bool render_svg(const std::string& dot_path, const std::string& svg_path);

}  // namespace mls
