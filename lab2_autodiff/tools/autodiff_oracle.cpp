// mls-autodiff-oracle: runs a random expression DAG written by the differential test
// (tests/oracle/autodiff_oracle.py) in every mode of lab 2 and writes the results for comparison
// with PyTorch.
//   mls-autodiff-oracle PROGRAM.json OUTDIR
// PROGRAM.json: {"leaves": [{"shape": [...], "values": [...]}, ...] (float64, node ids 0..L-1),
//                "ops": [{"op": "...", "in": [ids], ...attributes}, ...] (node ids L, L+1, ...),
//                "weights": [...] (L = sum(last node * weights)), "direction": [[...] per leaf]}
// OUTDIR gets, as .npy: value_<k> for every node (eager), grad_eager_<i> and grad_graph_<i>
// (dL/dleaf i), hvp_eager_<i> and hvp_graph_<i> (the Hessian of L times the direction), jvp
// (the forward-mode tangent of the last node along the direction), and meta.json with one error
// message (or null) per phase: eager, graph, hvp_eager, hvp_graph, jvp.
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mls/autodiff/forward.hpp"
#include "mls/autodiff/graph.hpp"
#include "mls/autodiff/var.hpp"
#include "mls/autodiff/workload.hpp"
#include "mls/common/file.hpp"

namespace {

using json = nlohmann::json;
using namespace mls;
using namespace mls::autodiff;

std::vector<std::int64_t> ints(const json& j) { return j.get<std::vector<std::int64_t>>(); }

Tensor f64(const json& values, const json& shape) {
  return Tensor::from_vector(values.get<std::vector<double>>(), ints(shape));
}

Var compare(const std::string& fn, const Var& a, const Var& b) {
  if (fn == "gt") return gt(a, b);
  if (fn == "lt") return lt(a, b);
  if (fn == "ge") return ge(a, b);
  return le(a, b);
}

/// The program's nodes built from `leaves` with Var ops (eager or graph, as the leaves are).
/// `konst` makes a constant in the leaves' world.
std::vector<Var> build(const json& prog, const std::vector<Var>& leaves) {
  std::vector<Var> n = leaves;
  const Var& like = leaves.front();
  auto konst = [&](const Tensor& t) { return constant_like(like, t); };
  for (const json& op : prog.at("ops")) {
    const std::string name = op.at("op");
    std::vector<Var> x;
    for (const auto& i : op.at("in")) x.push_back(n.at(i.get<std::size_t>()));
    auto I = [&](const char* k) { return op.at(k).get<std::int64_t>(); };
    auto axes = [&]() { return ints(op.at("axes")); };
    auto keep = [&]() { return op.at("keepdim").get<bool>(); };
    Var r;
    if (name == "neg") r = neg(x[0]);
    else if (name == "abs") r = abs(x[0]);
    else if (name == "exp") r = exp(x[0]);
    else if (name == "log") r = log(x[0]);
    else if (name == "sqrt") r = sqrt(x[0]);
    else if (name == "rsqrt") r = rsqrt(x[0]);
    else if (name == "sin") r = sin(x[0]);
    else if (name == "cos") r = cos(x[0]);
    else if (name == "tanh") r = tanh(x[0]);
    else if (name == "sigmoid") r = sigmoid(x[0]);
    else if (name == "relu") r = relu(x[0]);
    else if (name == "gelu") r = gelu(x[0]);
    else if (name == "add") r = add(x[0], x[1]);
    else if (name == "sub") r = sub(x[0], x[1]);
    else if (name == "mul") r = mul(x[0], x[1]);
    else if (name == "div") r = div(x[0], x[1]);
    else if (name == "pow") r = pow(x[0], x[1]);
    else if (name == "pow_scalar") r = pow(x[0], op.at("exponent").get<double>());
    else if (name == "maximum") r = maximum(x[0], x[1]);
    else if (name == "minimum") r = minimum(x[0], x[1]);
    else if (name == "where") r = where(compare(op.at("cmp"), x[0], x[1]), x[2], x[3]);
    else if (name == "sum") r = sum(x[0], axes(), keep());
    else if (name == "mean") r = mean(x[0], axes(), keep());
    else if (name == "max") r = max(x[0], axes(), keep());
    else if (name == "min") r = min(x[0], axes(), keep());
    else if (name == "reshape") r = reshape(x[0], ints(op.at("shape")));
    else if (name == "permute") r = permute(x[0], ints(op.at("dims")));
    else if (name == "slice") r = slice(x[0], I("dim"), I("start"), I("stop"), I("step"));
    else if (name == "expand") r = expand(x[0], ints(op.at("shape")));
    else if (name == "unsqueeze") r = unsqueeze(x[0], axes());
    else if (name == "squeeze") r = squeeze(x[0], axes());
    else if (name == "concat") r = concat(x, I("axis"));
    else if (name == "stack") r = stack(x, I("axis"));
    else if (name == "matmul") r = matmul(x[0], x[1]);
    else if (name == "softmax") r = softmax(x[0], I("axis"));
    else if (name == "log_softmax") r = log_softmax(x[0], I("axis"));
    else if (name == "logsumexp") r = logsumexp(x[0], I("axis"), keep());
    else if (name == "sce_probs") r = softmax_cross_entropy(x[0], x[1]);
    else if (name == "sce_index") {
      const auto t = ints(op.at("targets"));
      r = softmax_cross_entropy(x[0], konst(Tensor::from_vector(t)));
    } else if (name == "mse") r = mse_loss(x[0], x[1]);
    else if (name == "layer_norm") r = layer_norm(x[0], x[1], x[2], op.at("eps").get<double>());
    else if (name == "batch_norm") {
      const std::int64_t c = x[0].shape()[1];
      r = batch_norm(x[0], x[1], x[2], konst(Tensor::zeros({c}, DType::Float64)),
                     konst(Tensor::ones({c}, DType::Float64)), true, 0.1, op.at("eps").get<double>());
    } else if (name == "embedding") {
      r = embedding(x[0], konst(Tensor::from_vector(ints(op.at("indices")), ints(op.at("ishape")))));
    } else if (name == "conv2d") r = conv2d(x[0], x[1], I("stride"), I("pad"));
    else if (name == "max_pool2d") r = max_pool2d(x[0], I("k"), I("k"), I("stride"), I("pad"));
    else if (name == "avg_pool2d") r = avg_pool2d(x[0], I("k"), I("k"), I("stride"), I("pad"), op.at("include_pad").get<bool>());
    else if (name == "conv_transpose2d") r = conv_transpose2d(x[0], x[1], I("stride"), I("pad"), I("opad"));
    else if (name == "lstm_cell") {
      const LstmState st = lstm_cell(x[0], {x[1], x[2]}, x[3], x[4], x[5], x[6]);
      r = concat({st.h, st.c}, 1);
    } else if (name == "gru_cell") r = gru_cell(x[0], x[1], x[2], x[3], x[4], x[5]);
    else if (name == "spmm") {
      const auto col = ints(op.at("col_idx"));
      const CsrMatrix a(I("rows"), I("cols"), ints(op.at("row_ptr")), col,
                        Tensor::zeros({static_cast<std::int64_t>(col.size())}, DType::Float64));
      r = spmm(a, x[0], x[1]);
    } else if (name == "dropout") {
      r = dropout(x[0], op.at("p").get<double>(), op.at("seed").get<std::uint64_t>(), op.at("offset").get<std::uint64_t>());
    }
    else fail("oracle: unknown op '", name, "'");
    n.push_back(r);
  }
  return n;
}

void save_all(const std::string& dir, const std::string& prefix, const std::vector<Tensor>& ts) {
  for (std::size_t i = 0; i < ts.size(); ++i) save(dir + "/" + prefix + std::to_string(i) + ".npy", ts[i]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: mls-autodiff-oracle PROGRAM.json OUTDIR\n";
    return 2;
  }
  try {
    std::ifstream f(argv[1]);
    MLS_CHECK(f.good(), "mls-autodiff-oracle: cannot read ", argv[1]);
    const json prog = json::parse(f);
    const std::string out = argv[2];
    std::vector<Tensor> leaf_values, dirs;
    for (const json& l : prog.at("leaves")) leaf_values.push_back(f64(l.at("values"), l.at("shape")));
    for (std::size_t i = 0; i < leaf_values.size(); ++i) {
      dirs.push_back(f64(prog.at("direction").at(i), json(leaf_values[i].shape())));
    }
    json errors;
    auto phase = [&](const char* name, const std::function<void()>& body) {
      try {
        body();
        errors[name] = nullptr;
      } catch (const mls::Error& e) {
        errors[name] = e.what();
      }
    };
    const std::size_t L = leaf_values.size();
    // Eager: values, gradients, then the Hessian-vector product through create_graph.
    phase("eager", [&] {
      std::vector<Var> leaves;
      for (const Tensor& t : leaf_values) leaves.emplace_back(t, true);
      const std::vector<Var> nodes = build(prog, leaves);
      std::vector<Tensor> vals;
      for (const Var& v : nodes) vals.push_back(v.value());
      save_all(out, "value_", vals);
      const Var last = nodes.back();
      const Var loss = sum(last * Var(f64(prog.at("weights"), json(last.shape()))));
      loss.backward({}, false, /*create_graph=*/true);
      std::vector<Var> g;
      std::vector<Tensor> gv;
      for (const Var& l : leaves) {
        g.push_back(l.grad().defined() ? l.grad() : Var(Tensor::zeros(l.shape(), DType::Float64)));
        gv.push_back(g.back().value());
      }
      save_all(out, "grad_eager_", gv);
      phase("hvp_eager", [&] {
        Var s;
        for (std::size_t i = 0; i < L; ++i) {
          const Var term = sum(g[i] * Var(dirs[i]));
          s = s.defined() ? s + term : term;
        }
        for (Var& l : leaves) l.zero_grad();
        std::vector<Tensor> hv;
        if (s.requires_grad()) s.backward();
        for (const Var& l : leaves) {
          hv.push_back(l.grad().defined() ? l.grad().value() : Tensor::zeros(l.shape(), DType::Float64));
        }
        save_all(out, "hvp_eager_", hv);
      });
    });
    // Define-then-run: gradients() twice, one Executor run.
    phase("graph", [&] {
      Graph g;
      std::vector<Var> ph;
      Feeds feeds;
      for (std::size_t i = 0; i < L; ++i) {
        ph.push_back(g.placeholder("x" + std::to_string(i), leaf_values[i].shape(), DType::Float64));
        feeds.emplace_back(ph.back(), leaf_values[i]);
      }
      const std::vector<Var> nodes = build(prog, ph);
      const Var last = nodes.back();
      const Var loss = sum(last * g.constant(f64(prog.at("weights"), json(last.shape()))));
      const std::vector<Var> d1 = gradients(loss, ph);
      save_all(out, "grad_graph_", Executor(g).run(d1, feeds));
      phase("hvp_graph", [&] {
        Var s;
        for (std::size_t i = 0; i < L; ++i) {
          const Var term = sum(d1[i] * g.constant(dirs[i]));
          s = s.defined() ? s + term : term;
        }
        save_all(out, "hvp_graph_", Executor(g).run(gradients(s, ph), feeds));
      });
      phase("jvp", [&] {
        Feeds tangents;
        for (std::size_t i = 0; i < L; ++i) tangents.emplace_back(ph[i], dirs[i]);
        const JvpResult r = jvp({last}, feeds, tangents);
        save(out + "/jvp.npy", r.tangents[0]);
      });
    });
    json meta;
    meta["errors"] = errors;
    mls::write_file_atomic(out + "/meta.json", meta.dump() + "\n", "mls-autodiff-oracle");
  } catch (const std::exception& e) {
    std::cerr << "mls-autodiff-oracle: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
