// mls-tensor-ops: times lab 1 operations the way bench/compare_numpy.py times NumPy, so the
// two can be compared side by side.
//   mls-tensor-ops [--repeat N] [op ...]   one line per operation: "<op> <best seconds>"
//   mls-tensor-ops --serve                 the protocol compare_numpy.py drives, one command per line:
//       setup <op>     builds the inputs of <op> (and frees the previous op's), answers "ok"
//       run <op> <k>   runs <op> k times, answers the k times in seconds on one line
// The serve mode lets the script interleave our runs with NumPy's in one process pair pinned to
// the same cores, so that a load change on a shared machine hits both sides alike.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "mls/common/timer.hpp"
#include "mls/tensor/tensor.hpp"

namespace {

using mls::Tensor;

struct Case {
  std::function<void()> setup;
  std::function<void()> run;
};

}  // namespace

int main(int argc, char** argv) {
  int repeat = 10;
  bool serve = false;
  std::vector<std::string> ops;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--serve") == 0) {
      serve = true;
    } else if (std::strcmp(argv[i], "--help") == 0) {
      std::cout << "usage: mls-tensor-ops [--repeat N] [op ...] | --serve\n"
                   "ops: add mul_scalar exp compact_permute sum_last sum_first max_last softmax_last matmul\n";
      return 0;
    } else {
      ops.emplace_back(argv[i]);
    }
  }
  try {
    mls::Rng rng(7);
    Tensor a, b, c, x, p;
    const std::vector<std::int64_t> last{1}, first{0};
    std::map<std::string, Case> cases;
    // Shapes must match bench/compare_numpy.py. compact_permute avoids power-of-two strides:
    // with [64]^4 the permuted source walks 64 rows 16 KiB apart, which alias to the same cache
    // sets whenever the pages happen to be physically contiguous (huge pages, a fresh machine),
    // and NumPy's time then changes 3-4x from run to run with the physical layout.
    cases["add"] = {[&] { a = Tensor::rand({16 << 20}, rng); b = Tensor::rand({16 << 20}, rng); },
                    [&] { c = a + b; }};
    cases["mul_scalar"] = {[&] { a = Tensor::rand({16 << 20}, rng); }, [&] { c = a * 1.5; }};
    cases["exp"] = {[&] { a = Tensor::rand({4 << 20}, rng); }, [&] { c = mls::exp(a); }};
    cases["compact_permute"] = {[&] { x = Tensor::rand({64, 62, 64, 66}, rng); p = x.permute({0, 2, 3, 1}); },
                                [&] { c = p.compact(); }};
    cases["sum_last"] = {[&] { x = Tensor::rand({4096, 4096}, rng); }, [&] { c = mls::sum(x, last); }};
    cases["sum_first"] = {[&] { x = Tensor::rand({4096, 4096}, rng); }, [&] { c = mls::sum(x, first); }};
    cases["max_last"] = {[&] { x = Tensor::rand({4096, 4096}, rng); }, [&] { c = mls::max(x, last); }};
    cases["softmax_last"] = {[&] { x = Tensor::rand({1024, 1024}, rng); }, [&] { c = mls::softmax(x, -1); }};
    cases["matmul"] = {[&] { a = Tensor::rand({512, 512}, rng); b = Tensor::rand({512, 512}, rng); },
                       [&] { c = mls::matmul(a, b); }};
    auto find = [&](const std::string& op) -> Case* {
      auto it = cases.find(op);
      if (it == cases.end()) {
        std::cerr << "mls-tensor-ops: unknown op '" << op << "' (see --help)\n";
        return nullptr;
      }
      return &it->second;
    };
    if (serve) {
      std::string line;
      while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd, op;
        int k = 1;
        in >> cmd >> op >> k;
        Case* cs = find(op);
        if (cs == nullptr) return 2;
        if (cmd == "setup") {
          a = b = c = x = p = Tensor();
          cs->setup();
          std::cout << "ok" << std::endl;
        } else if (cmd == "run") {
          std::ostringstream times;
          for (int r = 0; r < k; ++r) {
            mls::Timer t;
            cs->run();
            times << (r ? " " : "") << t.seconds();
          }
          std::cout << times.str() << std::endl;
        } else {
          std::cerr << "mls-tensor-ops: unknown command '" << cmd << "' (setup or run)\n";
          return 2;
        }
      }
      return 0;
    }
    if (ops.empty()) {
      for (const auto& [name, _] : cases) ops.push_back(name);
    }
    for (const std::string& op : ops) {
      Case* cs = find(op);
      if (cs == nullptr) return 2;
      cs->setup();
      cs->run();  // warm up
      std::cout << op << ' ' << mls::time_min(cs->run, repeat) << std::endl;
      a = b = c = x = p = Tensor();
    }
    return 0;
  } catch (const mls::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
