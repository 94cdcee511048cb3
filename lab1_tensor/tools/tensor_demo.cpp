// mls-tensor-demo: a guided tour of lab 1 — strides, views, broadcasting, reductions and a .npy
// round trip — printing each step the way the lecture (slides 002, "Strides format") shows it.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

#include "mls/tensor/tensor.hpp"

namespace {

void show(const char* what, const mls::Tensor& t) {
  std::cout << "\n-- " << what << "\n" << t << "\n   strides " << mls::shape_str(t.strides()) << ", offset "
            << t.offset() << (t.is_contiguous() ? ", contiguous" : ", not contiguous") << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-tensor-demo: a tour of strided tensors (lab 1)"};
  std::string out = ".";
  app.add_option("--out", out, "folder for the .npy file the demo writes and reads back");
  CLI11_PARSE(app, argc, argv);
  try {
    using mls::Tensor;
    std::cout << "Lab 1 - strided tensors: a tensor is (storage, offset, shape, strides)\n";
    Tensor x = Tensor::arange(24).reshape({1, 2, 3, 4});
    show("x = arange(24).reshape([1, 2, 3, 4])   (slides: strides (24, 12, 4, 1))", x);
    std::cout << "   column-major strides of the same shape: " << mls::shape_str(mls::fortran_strides(x.shape()))
              << "   (slides: (1, 1, 2, 6))\n";

    Tensor m = Tensor::arange(6).reshape({2, 3});
    Tensor mt = m.transpose();
    show("m.transpose(): a view, same storage, strides swapped", mt);
    std::cout << "   shares storage with m: " << std::boolalpha << mt.shares_storage(m) << "\n";
    show("m.transpose().compact(): copied into row-major order", mt.compact());

    Tensor p = x.permute({0, 2, 3, 1});
    show("x.permute({0, 2, 3, 1})", p);
    show("x.slice(3, 0, 4, 2): every other column", x.slice(3, 0, 4, 2));
    show("m + [10, 20, 30]: the row is broadcast over both rows of m", m + Tensor::from({10.f, 20.f, 30.f}));
    show("[[1], [2]] + [10, 20, 30]  ->  shape [2, 3] by broadcasting (stride 0)",
         Tensor::from({1.f, 2.f}, {2, 1}) + Tensor::from({10.f, 20.f, 30.f}));
    show("sum(m, {0}): down the columns", mls::sum(m, {0}));
    show("sum(m, {1}, keepdim=true): along the rows", mls::sum(m, {1}, true));
    show("softmax(m, -1)", mls::softmax(m, -1));
    show("matmul(m, m.transpose())", mls::matmul(m, mt));

    std::filesystem::create_directories(out);
    const std::string path = (std::filesystem::path(out) / "lab1_demo.npy").string();
    mls::save(path, p);
    Tensor back = mls::load(path);
    std::cout << "\n-- .npy round trip: saved x.permute(...) to " << path << " and read it back: "
              << (mls::equal(back, p) ? "identical" : "DIFFERENT") << "\n"
              << "   (open it in NumPy: np.load('" << path << "'))\n";
    return mls::equal(back, p) ? 0 : 1;
  } catch (const mls::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
