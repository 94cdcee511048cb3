// mls-tensor-oracle: runs a program of lab 1 tensor operations written by the differential test
// (tests/oracle/tensor_oracle.py) and writes what it made, for comparison with NumPy.
//   mls-tensor-oracle PROGRAM.json OUTDIR
// PROGRAM.json: {"ops": [{"op": "...", "out": k, "in": [i, ...], ...attributes}, ...]}. Every op
// reads registers `in` and (unless it works in place) defines register `out`. An op that throws
// mls::Error records its message and defines nothing.
// OUTDIR gets r<k>.npy (the elements of register k in logical order) for every register, and
// meta.json: {"registers": {"k": {dtype, shape, strides, offset, storage}}, "errors": [msg|null per op]},
// where `storage` numbers the storage blocks so that views of one block share a number.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mls/common/file.hpp"
#include "mls/tensor/tensor.hpp"

namespace {

using json = nlohmann::json;
using mls::BinaryOp;
using mls::DType;
using mls::Shape;
using mls::Tensor;
using mls::UnaryOp;

std::vector<std::int64_t> ints(const json& j) { return j.get<std::vector<std::int64_t>>(); }

/// A number; JSON has no inf/nan, so they come as the strings "inf", "-inf" and "nan".
double num(const json& j) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    mls::fail("oracle: '", s, "' is not a number");
  }
  return j.get<double>();
}

UnaryOp unary_of(const std::string& n) {
  static const std::map<std::string, UnaryOp> m = {
      {"neg", UnaryOp::Neg},   {"abs", UnaryOp::Abs},   {"exp", UnaryOp::Exp},         {"log", UnaryOp::Log},
      {"sqrt", UnaryOp::Sqrt}, {"rsqrt", UnaryOp::Rsqrt}, {"sin", UnaryOp::Sin},       {"cos", UnaryOp::Cos},
      {"tanh", UnaryOp::Tanh}, {"sigmoid", UnaryOp::Sigmoid}, {"relu", UnaryOp::Relu}, {"gelu", UnaryOp::Gelu}};
  auto it = m.find(n);
  MLS_CHECK(it != m.end(), "oracle: unknown unary op '", n, "'");
  return it->second;
}

BinaryOp binary_of(const std::string& n) {
  static const std::map<std::string, BinaryOp> m = {
      {"add", BinaryOp::Add}, {"sub", BinaryOp::Sub}, {"mul", BinaryOp::Mul},         {"div", BinaryOp::Div},
      {"pow", BinaryOp::Pow}, {"maximum", BinaryOp::Maximum}, {"minimum", BinaryOp::Minimum},
      {"eq", BinaryOp::Eq},   {"ne", BinaryOp::Ne},   {"lt", BinaryOp::Lt},           {"le", BinaryOp::Le},
      {"gt", BinaryOp::Gt},   {"ge", BinaryOp::Ge}};
  auto it = m.find(n);
  MLS_CHECK(it != m.end(), "oracle: unknown binary op '", n, "'");
  return it->second;
}

/// Runs one op on the registers; returns the new tensor (undefined for in-place ops).
Tensor run_op(const json& op, std::map<std::int64_t, Tensor>& reg) {
  const std::string name = op.at("op");
  std::vector<Tensor> in;
  if (op.contains("in")) {
    for (const auto& i : op.at("in")) {
      auto it = reg.find(i.get<std::int64_t>());
      MLS_CHECK(it != reg.end(), "oracle: register ", i.get<std::int64_t>(), " is not defined");
      in.push_back(it->second);
    }
  }
  auto I = [&](const char* k) { return op.at(k).get<std::int64_t>(); };
  auto F = [&](const char* k) { return num(op.at(k)); };
  auto B = [&](const char* k) { return op.at(k).get<bool>(); };
  if (name == "tensor") {
    const DType t = mls::parse_dtype(op.at("dtype").get<std::string>());
    std::vector<double> v;
    for (const auto& x : op.at("values")) v.push_back(num(x));
    return Tensor::from_vector(v, ints(op.at("shape"))).to(t);
  }
  // views
  if (name == "permute") return in[0].permute(ints(op.at("dims")));
  if (name == "transpose") return in[0].transpose(I("dim0"), I("dim1"));
  if (name == "slice") return in[0].slice(I("dim"), I("start"), I("stop"), I("step"));
  if (name == "select") return in[0].select(I("dim"), I("index"));
  if (name == "expand") return in[0].expand(ints(op.at("shape")));
  if (name == "squeeze") return op.contains("dim") ? in[0].squeeze(I("dim")) : in[0].squeeze();
  if (name == "unsqueeze") return in[0].unsqueeze(I("dim"));
  if (name == "flatten") return in[0].flatten(I("start"), I("end"));
  if (name == "view") return in[0].view(ints(op.at("shape")));
  if (name == "reshape") return in[0].reshape(ints(op.at("shape")));
  if (name == "diagonal") return in[0].diagonal(I("k"), I("dim1"), I("dim2"));
  if (name == "flip") {  // negative stride along `dim`, through as_strided
    const Tensor& a = in[0];
    std::int64_t dim = I("dim");
    if (dim < 0) dim += a.ndim();
    MLS_CHECK(dim >= 0 && dim < a.ndim(), "flip: dim ", I("dim"), " out of range for ", a.ndim(), " dims");
    const auto d = static_cast<std::size_t>(dim);
    mls::Strides st = a.strides();
    std::int64_t off = a.offset();
    if (a.numel() > 0) off += (a.shape()[d] - 1) * st[d];
    st[d] = -st[d];
    return a.as_strided(a.shape(), st, a.numel() > 0 ? off : a.offset());
  }
  if (name == "chunk") {
    auto parts = mls::chunk(in[0], I("chunks"), I("axis"));
    const auto k = static_cast<std::size_t>(I("index"));
    MLS_CHECK(k < parts.size(), "chunk: piece ", k, " of ", parts.size());
    return parts[k];
  }
  if (name == "split") {
    auto parts = mls::split(in[0], I("size"), I("axis"));
    const auto k = static_cast<std::size_t>(I("index"));
    MLS_CHECK(k < parts.size(), "split: piece ", k, " of ", parts.size());
    return parts[k];
  }
  // copies
  if (name == "compact") return in[0].compact();
  if (name == "clone") return in[0].clone();
  if (name == "to") return in[0].to(mls::parse_dtype(op.at("dtype").get<std::string>()));
  if (name == "copy_") {
    in[0].copy_(in[1]);
    return {};
  }
  if (name == "fill_") {
    in[0].fill_(F("value"));
    return {};
  }
  // elementwise
  if (name == "unary") return mls::unary(unary_of(op.at("fn")), in[0]);
  if (name == "binary") return mls::binary(binary_of(op.at("fn")), in[0], in[1]);
  if (name == "binary_scalar") return mls::binary(binary_of(op.at("fn")), in[0], F("scalar"));
  if (name == "rdiv_scalar") return F("scalar") / in[0];
  if (name == "where") return mls::where(in[0], in[1], in[2]);
  if (name == "ibinary") {
    mls::binary_(binary_of(op.at("fn")), in[0], in[1]);
    return {};
  }
  if (name == "iscalar") {
    const std::string fn = op.at("fn");
    const double s = F("scalar");
    if (fn == "add") in[0] += s;
    else if (fn == "sub") in[0] -= s;
    else if (fn == "mul") in[0] *= s;
    else if (fn == "div") in[0] /= s;
    else mls::fail("oracle: unknown in-place scalar op '", fn, "'");
    return {};
  }
  // reductions
  if (name == "reduce") {
    const std::string fn = op.at("fn");
    const auto axes = ints(op.at("axes"));
    const bool keep = B("keepdim");
    if (fn == "sum") return mls::sum(in[0], axes, keep);
    if (fn == "mean") return mls::mean(in[0], axes, keep);
    if (fn == "prod") return mls::prod(in[0], axes, keep);
    if (fn == "max") return mls::max(in[0], axes, keep);
    if (fn == "min") return mls::min(in[0], axes, keep);
    if (fn == "var") return mls::var(in[0], axes, keep, I("correction"));
    mls::fail("oracle: unknown reduction '", fn, "'");
  }
  if (name == "argmax") return mls::argmax(in[0], I("axis"), B("keepdim"));
  if (name == "argmin") return mls::argmin(in[0], I("axis"), B("keepdim"));
  if (name == "softmax") return mls::softmax(in[0], I("axis"));
  if (name == "log_softmax") return mls::log_softmax(in[0], I("axis"));
  if (name == "logsumexp") return mls::logsumexp(in[0], I("axis"), B("keepdim"));
  if (name == "matmul") return mls::matmul(in[0], in[1]);
  if (name == "concat") return mls::concat(in, I("axis"));
  if (name == "stack") return mls::stack(in, I("axis"));
  mls::fail("oracle: unknown op '", name, "'");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: mls-tensor-oracle PROGRAM.json OUTDIR\n";
    return 2;
  }
  try {
    std::ifstream f(argv[1]);
    MLS_CHECK(f.good(), "mls-tensor-oracle: cannot read ", argv[1]);
    const json prog = json::parse(f);
    const std::string out = argv[2];
    std::map<std::int64_t, Tensor> reg;
    json errors = json::array();
    for (const json& op : prog.at("ops")) {
      try {
        Tensor r = run_op(op, reg);
        if (r.defined()) reg[op.at("out").get<std::int64_t>()] = r;
        errors.push_back(nullptr);
      } catch (const mls::Error& e) {
        errors.push_back(e.what());
      }
    }
    json meta;
    meta["errors"] = errors;
    meta["registers"] = json::object();
    std::map<const mls::Storage*, int> storage_ids;
    for (const auto& [k, t] : reg) {
      const auto [it, fresh] = storage_ids.emplace(t.storage().get(), static_cast<int>(storage_ids.size()));
      (void)fresh;
      json r;
      r["dtype"] = std::string(mls::dtype_name(t.dtype()));
      r["shape"] = t.shape();
      r["strides"] = t.strides();
      r["offset"] = t.offset();
      r["storage"] = it->second;
      meta["registers"][std::to_string(k)] = r;
      mls::save(out + "/r" + std::to_string(k) + ".npy", t);
    }
    mls::write_file_atomic(out + "/meta.json", meta.dump() + "\n", "mls-tensor-oracle");
  } catch (const std::exception& e) {
    std::cerr << "mls-tensor-oracle: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
