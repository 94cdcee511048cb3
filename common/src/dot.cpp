// A small Graphviz DOT writer, and rendering to SVG with the `dot` program when it is installed.
#include "mls/common/dot.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"

extern char** environ;

namespace mls {
namespace {

/// True for a plain DOT identifier ([A-Za-z_][A-Za-z0-9_]*), which needs no quotes.
bool is_plain_id(const std::string& s) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

/// " [k1="v1", k2="v2"]", or "" when there are no attributes. `label` (if not null) goes first.
std::string attr_list(const std::string* label, const DotAttrs& attrs) {
  std::string s;
  if (label) {
    s += "label=";
    s += dot_quote(*label);
  }
  for (const auto& [k, v] : attrs) {
    if (!s.empty()) s += ", ";
    s += is_plain_id(k) ? k : dot_quote(k);
    s += '=';
    s += dot_quote(v);
  }
  if (s.empty()) return s;
  s.insert(0, " [");
  s += ']';
  return s;
}

/// The full path of an executable `name` found on PATH, if any.
std::optional<std::string> find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path || !*path) return std::nullopt;
  std::string_view rest(path);
  for (;;) {
    const std::size_t colon = rest.find(':');
    const std::string_view dir = rest.substr(0, colon);
    const std::string candidate = detail::cat(dir.empty() ? std::string_view(".") : dir, '/', name);
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return std::nullopt;
}

}  // namespace

std::string dot_quote(const std::string& s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        // "\r\n" is one line break; a lone '\r' also ends a line.
        if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out + "\"";
}

DotGraph::DotGraph(std::string name, DotAttrs graph_attrs)
    : name_(std::move(name)), graph_attrs_(std::move(graph_attrs)) {}

void DotGraph::node(const std::string& id, const std::string& label, DotAttrs attrs) {
  lines_.push_back(detail::cat(std::string(2 * (depth_ + 1), ' '), dot_quote(id),
                               attr_list(&label, attrs), ";"));
  ++num_nodes_;
}

void DotGraph::edge(const std::string& from, const std::string& to, const std::string& label,
                    DotAttrs attrs) {
  lines_.push_back(detail::cat(std::string(2 * (depth_ + 1), ' '), dot_quote(from), " -> ",
                               dot_quote(to), attr_list(label.empty() ? nullptr : &label, attrs),
                               ";"));
  ++num_edges_;
}

void DotGraph::begin_cluster(const std::string& name, const std::string& label) {
  const std::string indent(2 * (depth_ + 1), ' ');
  // Graphviz draws a subgraph as a box only when its name starts with "cluster".
  lines_.push_back(
      detail::cat(indent, "subgraph ", dot_quote(detail::cat("cluster_", name)), " {"));
  lines_.push_back(detail::cat(indent, "  label=", dot_quote(label), ";"));
  ++depth_;
}

void DotGraph::end_cluster() {
  MLS_CHECK(depth_ > 0, "DotGraph::end_cluster: no cluster is open in graph '", name_, "'");
  --depth_;
  lines_.push_back(std::string(2 * (depth_ + 1), ' ') + "}");
}

std::string DotGraph::str() const {
  std::ostringstream os;
  os << "digraph " << dot_quote(name_) << " {\n";
  for (const auto& [k, v] : graph_attrs_) {
    os << "  " << (is_plain_id(k) ? k : dot_quote(k)) << '=' << dot_quote(v) << ";\n";
  }
  for (const auto& line : lines_) os << line << '\n';
  // Clusters still open are closed, so the text is always valid DOT.
  for (int d = depth_; d > 0; --d) os << std::string(2 * d, ' ') << "}\n";
  os << "}\n";
  return os.str();
}

void DotGraph::write(const std::string& path) const {
  write_file_atomic(path, str(), "dot: cannot open '" + path + "' for writing");
}

bool render_svg(const std::string& dot_path, const std::string& svg_path) {
  const std::optional<std::string> dot = find_on_path("dot");
  if (!dot) return false;

  // dot's stderr comes back through a pipe so that its complaint goes into the error message.
  int err_pipe[2];
  MLS_CHECK(::pipe2(err_pipe, O_CLOEXEC) == 0, "render_svg: pipe failed: ", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  // A path starting with '-' would be read as an option: "./-x.dot" names the same file.
  std::string a0 = "dot", a1 = "-Tsvg", a2 = dot_path.starts_with('-') ? "./" + dot_path : dot_path,
              a3 = "-o", a4 = svg_path;
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, dot->c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(err_pipe[0]);
    fail("render_svg: cannot run '", *dot, "': ", std::strerror(rc));
  }
  std::string err;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(err_pipe[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (err.size() < 4096) err.append(buf, static_cast<std::size_t>(n));
  }
  ::close(err_pipe[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    MLS_CHECK(errno == EINTR, "render_svg: waitpid failed: ", std::strerror(errno));
  }
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string how = WIFEXITED(status) ? detail::cat("exit status ", WEXITSTATUS(status))
                                              : detail::cat("killed by signal ", WTERMSIG(status));
    fail("render_svg: 'dot -Tsvg ", dot_path, " -o ", svg_path, "' failed (", how, ")",
         err.empty() ? "" : ": ", err);
  }
  return true;
}

}  // namespace mls
