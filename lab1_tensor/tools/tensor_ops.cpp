// mls-tensor-ops: times lab 1 operations the way bench/compare_numpy.py times NumPy, so the
// two can be compared side by side. Prints one line per operation: "<op> <best seconds>".
//   mls-tensor-ops [--repeat N] [op ...]      (default: every op below)
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
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
  std::vector<std::string> ops;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--help") == 0) {
      std::cout << "usage: mls-tensor-ops [--repeat N] [op ...]\n"
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
    // Shapes must match bench/compare_numpy.py.
    cases["add"] = {[&] { a = Tensor::rand({16 << 20}, rng); b = Tensor::rand({16 << 20}, rng); },
                    [&] { c = a + b; }};
    cases["mul_scalar"] = {[&] { a = Tensor::rand({16 << 20}, rng); }, [&] { c = a * 1.5; }};
    cases["exp"] = {[&] { a = Tensor::rand({4 << 20}, rng); }, [&] { c = mls::exp(a); }};
    cases["compact_permute"] = {[&] { x = Tensor::rand({64, 64, 64, 64}, rng); p = x.permute({0, 2, 3, 1}); },
                                [&] { c = p.compact(); }};
    cases["sum_last"] = {[&] { x = Tensor::rand({4096, 4096}, rng); }, [&] { c = mls::sum(x, last); }};
    cases["sum_first"] = {[&] { x = Tensor::rand({4096, 4096}, rng); }, [&] { c = mls::sum(x, first); }};
    cases["max_last"] = {[&] { x = Tensor::rand({4096, 4096}, rng); }, [&] { c = mls::max(x, last); }};
    cases["softmax_last"] = {[&] { x = Tensor::rand({1024, 1024}, rng); }, [&] { c = mls::softmax(x, -1); }};
    cases["matmul"] = {[&] { a = Tensor::rand({512, 512}, rng); b = Tensor::rand({512, 512}, rng); },
                       [&] { c = mls::matmul(a, b); }};
    if (ops.empty()) {
      for (const auto& [name, _] : cases) ops.push_back(name);
    }
    for (const std::string& op : ops) {
      auto it = cases.find(op);
      if (it == cases.end()) {
        std::cerr << "mls-tensor-ops: unknown op '" << op << "' (see --help)\n";
        return 2;
      }
      it->second.setup();
      it->second.run();  // warm up
      std::cout << op << ' ' << mls::time_min(it->second.run, repeat) << std::endl;
      a = b = c = x = p = Tensor();
    }
    return 0;
  } catch (const mls::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
