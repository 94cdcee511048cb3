// mls-autodiff-graph: writes the forward and backward graphs of the lectures' examples as
// Graphviz .dot files (and .svg when Graphviz's `dot` is installed).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>

#include "mls/autodiff/examples.hpp"

using namespace mls;
using namespace mls::autodiff;

namespace {
void write(const Graph& g, const std::string& dir, const std::string& name, bool svg) {
  for (bool backward : {false, true}) {
    const std::string stem = dir + "/" + name + (backward ? "_backward" : "_forward");
    const DotGraph d = to_dot(g, {.title = name + (backward ? " (forward + backward)" : " (forward)"),
                                  .show_backward = backward});
    d.write(stem + ".dot");
    const bool rendered = svg && render_svg(stem + ".dot", stem + ".svg");
    std::cout << stem << ".dot  (" << d.num_nodes() << " nodes, " << d.num_edges() << " edges)"
              << (rendered ? "  + .svg" : "") << "\n";
  }
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Draw the forward and backward graphs of lab 2's worked examples (Graphviz DOT)."};
  std::string out = "graphs";
  bool no_svg = false;
  app.add_option("-o,--out", out, "output folder")->capture_default_str();
  app.add_flag("--no-svg", no_svg, "do not run Graphviz's dot even when it is installed");
  CLI11_PARSE(app, argc, argv);
  try {
    std::filesystem::create_directories(out);
    {
      Graph g;
      const Var x1 = g.placeholder("x1", {}), x2 = g.placeholder("x2", {});
      (void)gradients(examples::slide_function(x1, x2), {x1, x2});
      write(g, out, "slide_trace", !no_svg);
    }
    {
      Graph g;
      const Var v1 = g.placeholder("v1", {});
      (void)gradients(examples::exp_example(v1), {v1});
      write(g, out, "exp_example", !no_svg);
    }
    write(*examples::logistic_regression(Tensor::zeros({784, 10})).graph, out, "logistic_regression", !no_svg);
    write(*examples::two_layer_mlp(Tensor::zeros({784, 256}), Tensor::zeros({256, 10})).graph, out, "two_layer_mlp",
          !no_svg);
  } catch (const mls::Error& e) {
    std::cerr << "mls-autodiff-graph: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
