// Lab 4 part 2: the operator templates of the autotuner (mls/kernels/tune_ops.hpp) and what they
// need of the schedule language and the code generator: every knob combination of each template on
// shapes with 1 and primes (interpreted, and a small space compiled at 1 and 2 threads) equal to
// naive loops written here in double precision; the knobs' JSON; named errors for bad problems and
// knobs; the generated code's polynomial exp against std::exp; compute_at with several readers,
// an output computed at a loop, set_scope; the search on a synthetic cost and on real candidates for
// each strategy; the tuning database's op records. Not graded (not in lab.json).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "codegen_internal.hpp"
#include "jit_test_util.hpp"
#include "mls/common/fastmath.hpp"
#include "mls/common/rng.hpp"
#include "mls/common/kernels.hpp"
#include "mls/kernels/codegen.hpp"
#include "mls/kernels/fused.hpp"
#include "mls/kernels/tune_ops.hpp"
#include "mls/testing.hpp"

using namespace mls::kernels;
using tune::OpKind;
using tune::OpKnobs;
using tune::OpProblem;
using tune::OpSpace;

namespace {

using Want = std::map<std::string, std::vector<double>>;

/// The operator's outputs computed by plain loops in double precision (the independent reference).
Want naive(const OpProblem& p, const tune::OpArrays& a) {
  Want w;
  const long R = p.rows, C = p.cols;
  auto at = [&](const char* name, long i) { return static_cast<double>(a.at(name)[static_cast<std::size_t>(i)]); };
  if (p.kind == OpKind::Softmax) {
    for (long r = 0; r < R; ++r) {
      double m = -1e300, s = 0;
      for (long c = 0; c < C; ++c) m = std::max(m, at("x", r * C + c));
      for (long c = 0; c < C; ++c) s += std::exp(at("x", r * C + c) - m);
      for (long c = 0; c < C; ++c) w["y"].push_back(std::exp(at("x", r * C + c) - m) / s);
    }
  } else if (p.kind == OpKind::LayerNormFwd) {
    for (long r = 0; r < R; ++r) {
      double m = 0, v = 0;
      for (long c = 0; c < C; ++c) m += at("x", r * C + c) / static_cast<double>(C);
      for (long c = 0; c < C; ++c) v += std::pow(at("x", r * C + c) - m, 2) / static_cast<double>(C);
      const double rs = 1.0 / std::sqrt(v + p.eps);
      for (long c = 0; c < C; ++c) w["out"].push_back((at("x", r * C + c) - m) * rs * at("weight", c) + at("bias", c));
      w["mean"].push_back(m);
      w["rstd"].push_back(rs);
    }
  } else if (p.kind == OpKind::LayerNormBwd) {
    std::vector<double> dw(static_cast<std::size_t>(C)), db(static_cast<std::size_t>(C));
    for (long c = 0; c < C; ++c) dw[c] = at("dweight_in", c), db[c] = at("dbias_in", c);
    for (long r = 0; r < R; ++r) {
      const double m = at("mean", r), rs = at("rstd", r);
      double ma = 0, mb = 0;
      for (long c = 0; c < C; ++c) {
        const double xh = (at("x", r * C + c) - m) * rs, dn = at("weight", c) * at("dout", r * C + c);
        ma += dn / static_cast<double>(C);
        mb += dn * xh / static_cast<double>(C);
      }
      for (long c = 0; c < C; ++c) {
        const double xh = (at("x", r * C + c) - m) * rs, dy = at("dout", r * C + c), dn = at("weight", c) * dy;
        w["dinp"].push_back(at("dinp_in", r * C + c) + rs * (dn - ma - xh * mb));
        dw[c] += dy * xh;
        db[c] += dy;
      }
    }
    w["dweight"] = dw;
    w["dbias"] = db;
  } else if (p.kind == OpKind::AddMulAdd) {
    for (long i = 0; i < p.n; ++i) w["e"].push_back(at("d", i) + (at("a", i) + at("b", i)) * at("c", i));
  } else {
    for (long b = 0; b < p.n; ++b)
      for (long o = 0; o < p.k; ++o)
        for (long y = 0; y < p.oh(); ++y)
          for (long x = 0; x < p.ow(); ++x) {
            double acc = 0;
            for (long c = 0; c < p.c; ++c)
              for (long i = 0; i < p.kh; ++i)
                for (long j = 0; j < p.kh; ++j) {
                  const long iy = y * p.stride + i - p.pad, ix = x * p.stride + j - p.pad;
                  if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) continue;
                  acc += at("x", ((b * p.c + c) * p.h + iy) * p.w + ix) * at("w", ((o * p.c + c) * p.kh + i) * p.kh + j);
                }
            w["y"].push_back(acc);
          }
  }
  return w;
}

/// The longest reduction behind an output element (its rounding grows with it).
double length_of(const OpProblem& p, const std::string& name) {
  if (p.kind == OpKind::AddMulAdd) return 1;
  if (p.kind == OpKind::Conv2d) return static_cast<double>(p.c * p.kh * p.kh);
  if (p.kind == OpKind::LayerNormBwd && name != "dinp") return static_cast<double>(p.rows);
  return static_cast<double>(p.cols);
}

/// Every output of `got` equals the naive reference within 8 (L + 8) eps of its largest magnitude
/// (layernorm: times rstd <= 1 / sqrt(eps) as well, for rows that are nearly constant).
void require_matches(const OpProblem& p, const tune::OpArrays& got, const Want& want, const std::string& what) {
  for (const auto& [name, w] : want) {
    INFO(what << ": output " << name);
    const tune::OpArray& g = got.at(name);
    REQUIRE(g.size() == w.size());
    double scale = 1e-30, worst = 0;
    for (double x : w) scale = std::max(scale, std::fabs(x));
    for (std::size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]));
    const double tol = 8 * (length_of(p, name) + 8) * std::numeric_limits<float>::epsilon() * scale;
    INFO("largest error " << worst << ", tolerance " << tol);
    CHECK(worst <= tol);
  }
}

/// Problems of every operator with extents of 1 and primes (rows shorter and longer than the
/// partials of every width, a tail after them, row blocks that do not divide the rows).
std::vector<OpProblem> awkward_problems() {
  std::vector<OpProblem> ps;
  for (OpKind k : {OpKind::Softmax, OpKind::LayerNormFwd, OpKind::LayerNormBwd})
    for (auto [r, c] : std::vector<std::pair<long, long>>{{1, 1}, {3, 17}, {5, 67}, {2, 48}})  // 48: no tail after
      ps.push_back(tune::row_problem(k, r, c));                                                   // some partials
  for (long n : {1L, 37L, 5003L}) ps.push_back(tune::elementwise_problem(n));
  ps.push_back(tune::conv2d_problem(1, 1, 1, 1, 1, 1, 1, 0));
  ps.push_back(tune::conv2d_problem(1, 3, 7, 5, 5, 3, 2, 1));
  ps.push_back(tune::conv2d_problem(2, 2, 5, 6, 3, 3, 1, 0));
  return ps;
}

/// A private tuning database and JIT cache for a test's scope.
struct OpsEnv {
  mls::testing::TempDir dir{"tune_ops"};
  kernels_test::EnvGuard db{"MLS_TUNING_DB", dir.file("tuning.jsonl")};
  kernels_test::EnvGuard cache{"MLS_JIT_CACHE", dir.file("jit")};
};

jit::CompileOptions quick_jit() {
  jit::CompileOptions o;
  o.opt_level = "-O1";
  return o;
}

}  // namespace

TEST_CASE("tune ops: operators, problems, arrays and their errors", "[tune_ops][base]") {
  for (OpKind k : tune::op_kinds()) CHECK(tune::op_kind_from_string(tune::op_name(k)) == k);
  CHECK(tune::op_name(OpKind::LayerNormBwd) == "layernorm_bwd");
  CHECK(tune::op_template_id(OpKind::Conv2d) == "conv2d.v1");
  REQUIRE_THROWS_WITH(tune::op_kind_from_string("gelu"), Catch::Contains("tune: unknown operator 'gelu' (softmax,"));
  const OpProblem sm = tune::row_problem(OpKind::Softmax, 4096, 1024);
  CHECK(tune::to_string(sm) == "4096x1024");
  CHECK(tune::to_json(sm) == nlohmann::json{{"rows", 4096}, {"cols", 1024}});
  CHECK(tune::op_bytes(sm) == 8.0 * 4096 * 1024);
  const OpProblem cv = tune::conv2d_problem(1, 64, 56, 56, 64, 3, 1, 1);
  CHECK(tune::to_string(cv) == "n1_c64_h56_w56_k64_kh3_s1_p1");
  CHECK(cv.oh() == 56);
  CHECK(tune::op_flops(cv) == 2.0 * 64 * 56 * 56 * 64 * 9);
  CHECK(tune::op_bytes(tune::row_problem(OpKind::LayerNormBwd, 2, 3)) == 4.0 * (4 * 6 + 5 * 3 + 2 * 2));
  const auto args = tune::op_args(tune::row_problem(OpKind::LayerNormFwd, 2, 3));
  REQUIRE(args.size() == 6);
  CHECK(args[3].name == "out");
  CHECK(args[3].output);
  CHECK_FALSE(args[2].output);
  REQUIRE_THROWS_WITH(tune::check_problem(tune::row_problem(OpKind::Softmax, 0, 5)),
                      Catch::Contains("tune softmax: rows 0 must be in 1.."));
  REQUIRE_THROWS_WITH(tune::check_problem(tune::elementwise_problem(-3)), Catch::Contains("tune add_mul_add: n -3"));
  REQUIRE_THROWS_WITH(tune::check_problem(tune::conv2d_problem(1, 1, 5, 5, 1, 3, 1, 3)),
                      Catch::Contains("tune conv2d: pad 3 must be in 0..kh - 1 (kh 3)"));
  REQUIRE_THROWS_WITH(tune::check_problem(tune::conv2d_problem(1, 1, 2, 9, 1, 5, 1, 1)),
                      Catch::Contains("tune conv2d: kernel 5x5 is larger than the padded image 4x11"));
  REQUIRE_THROWS_WITH(tune::check_problem(tune::conv2d_problem(1, 1, 5, 5, 1, 3, 0, 0)),
                      Catch::Contains("tune conv2d: stride 0"));
  REQUIRE_THROWS_WITH(tune::row_problem(OpKind::Conv2d, 2, 2), Catch::Contains("row_problem: conv2d is not a row operator"));
}

TEST_CASE("tune ops: knobs, their JSON and spaces, bad knobs as named errors", "[tune_ops][knobs]") {
  for (const OpProblem& p : awkward_problems()) {
    for (int threads : {1, 2}) {
      const OpSpace space = OpSpace::full(p, threads, 16);
      INFO(tune::op_name(p.kind) << " " << tune::to_string(p) << " at " << threads << " threads");
      const auto all = space.enumerate();
      REQUIRE(all.size() == space.cross_size());
      std::set<std::string> keys;
      for (const auto& k : all) {
        CHECK(space.valid(k));
        CHECK(tune::op_knobs_from_json(p.kind, tune::op_knobs_to_json(p.kind, k)) == k);
        CHECK(space.knobs_at(space.point_of(k)) == k);
        keys.insert(tune::op_plan_key(p, k));
      }
      CHECK(keys.size() <= all.size());
      const tune::SearchSpace ss = space.search_space();
      ss.check();
      CHECK(ss.enumerate().size() == all.size());
      const OpKnobs d = space.default_knobs();
      CHECK(space.valid(d));
      CHECK(d.at("parallel") == (threads > 1 ? 1 : 0));
      for (const auto& n : ss.neighbours(space.point_of(d))) CHECK(space.valid(space.knobs_at(n)));
    }
  }
  const OpProblem p = tune::row_problem(OpKind::Softmax, 8, 100);
  const OpKnobs k = OpSpace::full(p, 1, 16).default_knobs();
  CHECK(tune::to_string(k) ==
        "acc=2 exp2=1 expsum=1 fuse=1 hold=1 lanes=16 parallel=0 pcache=2 prefetch=2 spread=1 stream=0 unroll=1");
  const nlohmann::json j = tune::op_knobs_to_json(OpKind::Softmax, k);
  CHECK(j.at("template") == "softmax.v5");
  CHECK(tune::op_schedule_json(OpKind::Softmax, k, true).at("measure") == "confirmed");
  OpKnobs bad = k;
  bad["tile"] = 4;
  REQUIRE_THROWS_WITH(tune::check_op_knobs(p, bad, 16), Catch::Contains("softmax knobs: unknown knob 'tile'"));
  bad = k;
  bad.erase("hold");
  REQUIRE_THROWS_WITH(tune::check_op_knobs(p, bad, 16), Catch::Contains("softmax knobs: knob 'hold' is missing"));
  bad = k;
  bad["acc"] = 3;
  REQUIRE_THROWS_WITH(tune::check_op_knobs(p, bad, 16), Catch::Contains("softmax knobs: acc 3 is not one of 0, 1, 2, 4"));
  REQUIRE_THROWS_WITH(tune::check_op_knobs(p, k, 8), Catch::Contains("softmax knobs: lanes 16 is more than the 8 lanes"));
  REQUIRE_THROWS_WITH(tune::op_knobs_from_json(OpKind::LayerNormFwd, j),
                      Catch::Contains("layernorm_fwd knobs: template \"softmax.v5\" is not 'layernorm_fwd.v4'"));
  nlohmann::json jb = j;
  jb["acc"] = "two";
  REQUIRE_THROWS_WITH(tune::op_knobs_from_json(OpKind::Softmax, jb), Catch::Contains("knob 'acc' must be an integer"));
  jb = j;
  jb.erase("unroll");
  REQUIRE_THROWS_WITH(tune::op_knobs_from_json(OpKind::Softmax, jb), Catch::Contains("knob 'unroll' is missing"));
  REQUIRE_THROWS_WITH(tune::instantiate_op(p, bad), Catch::Contains("softmax knobs: acc 3"));
  // Knobs the problem does not use are one plan: a row shorter than the partials has no lanes.
  OpKnobs a = k, b = k;
  a["acc"] = 4;
  b["acc"] = 2;
  CHECK(tune::op_plan_key(tune::row_problem(OpKind::Softmax, 3, 17), a) ==
        tune::op_plan_key(tune::row_problem(OpKind::Softmax, 3, 17), b));
  CHECK(tune::op_plan_key(p, a) != tune::op_plan_key(p, b));
}

TEST_CASE("tune ops: every knob combination, interpreted, equals naive loops on awkward shapes", "[tune_ops][interpret]") {
  for (const OpProblem& p : awkward_problems()) {
    const tune::OpArrays in = tune::make_op_arrays(p, 5);
    const Want want = naive(p, in);
    std::set<std::string> done;
    for (const OpKnobs& k : OpSpace::full(p, 2, 16).enumerate()) {
      OpKnobs same = k;  // streamed stores and prefetches are the code generator's: the loop nest is the same
      if (same.count("stream")) same["stream"] = 0;
      if (same.count("prefetch")) same["prefetch"] = 0;
      if (!done.insert(tune::op_plan_key(p, same)).second) continue;
      const std::string what = tune::op_name(p.kind) + " " + tune::to_string(p) + " " + tune::to_string(k);
      tune::OpArrays got = in;
      tune::interpret_op(tune::instantiate_op(p, k), got);
      require_matches(p, got, want, what);
    }
    INFO(tune::op_name(p.kind) << " " << tune::to_string(p));
    CHECK(done.size() >= 2);
  }
}

TEST_CASE("tune ops: a small space of each template, compiled, at 1 and 2 threads", "[tune_ops][compiled]") {
  OpsEnv env;
  for (const OpProblem& p : {tune::row_problem(OpKind::Softmax, 5, 67), tune::row_problem(OpKind::Softmax, 4, 64),
                             tune::row_problem(OpKind::LayerNormFwd, 5, 67), tune::row_problem(OpKind::LayerNormFwd, 4, 64),
                             tune::row_problem(OpKind::LayerNormBwd, 7, 41), tune::elementwise_problem(5003),
                             tune::conv2d_problem(2, 3, 7, 5, 5, 3, 2, 1)}) {
    const tune::OpArrays in = tune::make_op_arrays(p, 9);
    const Want want = naive(p, in);
    // The space for 2 threads (parallel loops), run at 1 thread (the loops serial) and at 2.
    const std::vector<OpKnobs> ks = OpSpace::small(p, 2).enumerate();
    const std::vector<tune::CompiledOp> ops = tune::compile_ops(p, ks, quick_jit());
    for (int threads : {1, 2}) {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        tune::OpArrays got = in;
        ops[i].run(got, threads);
        require_matches(p, got, want,
                        tune::op_name(p.kind) + " compiled, " + tune::to_string(ks[i]) + ", threads " +
                            std::to_string(threads));
      }
    }
    // The hand-written kernel (the tuner's reference) agrees too.
    tune::OpArrays hand = in;
    tune::run_hand_written(p, hand);
    require_matches(p, hand, want, tune::op_name(p.kind) + " hand-written");
    CHECK(tune::op_error(p, hand, hand) == 0.0);
  }
  // The knobs the small space fixes at 1, both ways: softmax's exp2 (0: Cephes' exp) and layernorm
  // forward's sqsum (rows of 64: the partials leave no tail, so the one-pass loop is taken).
  for (const OpProblem& p : {tune::row_problem(OpKind::Softmax, 4, 64), tune::row_problem(OpKind::LayerNormFwd, 4, 64)}) {
    const tune::OpArrays in = tune::make_op_arrays(p, 11);
    const Want want = naive(p, in);
    for (int v : {0, 1}) {
      OpKnobs k = OpSpace::small(p, 1).default_knobs();
      const char* knob = p.kind == OpKind::Softmax ? "exp2" : "sqsum";
      k[knob] = v;
      CHECK(tune::op_plan(p, k).at(knob) == v);
      tune::OpArrays got = in;
      tune::compile_op(p, k, quick_jit()).run(got, 1);
      require_matches(p, got, want, tune::op_name(p.kind) + " compiled, " + tune::to_string(k));
    }
  }
  // Arrays of the wrong size or missing are named.
  const OpProblem p = tune::row_problem(OpKind::Softmax, 2, 3);
  const tune::CompiledOp op = tune::compile_op(p, OpSpace::small(p, 1).default_knobs(), quick_jit());
  tune::OpArrays a = tune::make_op_arrays(p, 1);
  a.at("y").pop_back();
  REQUIRE_THROWS_WITH(op.run(a), Catch::Contains("CompiledOp: array 'y' has 5 floats"));
  a.erase("x");
  REQUIRE_THROWS_WITH(op.run(a), Catch::Contains("CompiledOp: no array 'x'"));
}

/// The inputs both generated exps are checked at past their range: +-inf, NaN, above log(FLT_MAX),
/// below log(FLT_MIN) and below the AVX-512 clamp (-104).
static std::vector<float> exp_edges() {
  const float inf = std::numeric_limits<float>::infinity();
  return {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 89.0f, 1000.0f, -104.0f, -1000.0f};
}

/// Checks a generated exp's y = exp(x) where x is NaN or out of the float range (NaN stays NaN, +inf
/// above log(FLT_MAX), 0 or a denormal below log(FLT_MIN): AVX-512's vscalefps); false for an x in
/// the range, whose error the caller checks.
static bool check_exp_edge(float x, float y) {
  if (std::isnan(x)) {
    CHECK(std::isnan(y));
  } else if (x > 88.7228394f) {
    CHECK(y == std::numeric_limits<float>::infinity());
  } else if (x < -87.3365479f) {
    CHECK(y >= 0.0f);
    CHECK(y < 1.2e-38f);
  } else {
    return false;
  }
  return true;
}

TEST_CASE("tune ops: softmax's and layernorm's default schedules, compiled, on rows of 1 to 4097 columns with -inf and "
          "large inputs equal naive loops", "[tune_ops][rows]") {
  OpsEnv env;
  const float inf = std::numeric_limits<float>::infinity();
  // Columns around every width of the partials (16 lanes x 1, 2, 4 accumulators) and a row's tail,
  // up to 4097; rows with masked (-inf) entries, values far apart (exp(x - max) underflows to 0)
  // and a row whose max is large (x - max down to -2e30).
  for (long cols : {1L, 2L, 15L, 16L, 17L, 31L, 33L, 64L, 100L, 1023L, 1024L, 1025L, 4096L, 4097L})
    for (OpKind kind : {OpKind::Softmax, OpKind::LayerNormFwd}) {
      if (kind == OpKind::LayerNormFwd && cols > 100 && cols != 1025) continue;  // its exp-free paths: fewer shapes
      const OpProblem p = tune::row_problem(kind, 4, cols);
      tune::OpArrays in = tune::make_op_arrays(p, 9);
      tune::OpArray& x = in.at("x");
      mls::Rng rng(11, "rows");
      for (long c = 0; c < cols; ++c) {
        if (kind == OpKind::Softmax && c % 3 == 1) x[static_cast<std::size_t>(c)] = -inf;  // row 0: masked entries
        x[static_cast<std::size_t>(cols + c)] = static_cast<float>(rng.uniform(-90.0, 90.0));  // row 1: far apart
        if (c % 7 == 3) x[static_cast<std::size_t>(2 * cols + c)] = c % 2 ? 1e30f : -1e30f;  // row 2: huge
      }
      if (kind == OpKind::LayerNormFwd)  // huge values that cancel are float summation's limit, not the kernel's: row 2 x 1000
        for (long c = 0; c < cols; ++c) x[static_cast<std::size_t>(2 * cols + c)] = 1000.0f * in.at("x")[static_cast<std::size_t>(3 * cols + c)];
      const Want want = naive(p, in);
      const OpKnobs k = OpSpace::full(p, 1).default_knobs();
      const std::string what = tune::op_name(kind) + " " + tune::to_string(p) + " " + tune::to_string(k);
      tune::OpArrays got = in;
      tune::compile_op(p, k, quick_jit()).run(got, 1);
      require_matches(p, got, want, what);
      if (kind == OpKind::Softmax) {  // each row adds up to 1 (the masked row's -inf entries are 0)
        for (long r = 0; r < 4; ++r) {
          double sum = 0;
          for (long c = 0; c < cols; ++c) sum += got.at("y")[static_cast<std::size_t>(r * cols + c)];
          INFO(what << ": row " << r);
          CHECK(sum == Approx(1.0).epsilon(1e-5));
        }
        for (long c = 1; c < cols; c += 3) CHECK(got.at("y")[static_cast<std::size_t>(c)] == 0.0f);
      }
    }
}

TEST_CASE("tune ops: the generated code's exp (fast_exp) is within 2 ulp of std::exp and vectorizes", "[tune_ops][exp]") {
  OpsEnv env;
  std::vector<float> x;
  mls::Rng rng(3, "exp");
  for (int i = 0; i < 4000; ++i) x.push_back(static_cast<float>(rng.uniform(-87.3, 88.7)));
  for (float v : {0.0f, -0.0f, 1.0f, -1.0f, 1e-8f, 88.0f, -87.0f, 0.5f * 0.6931472f, 20.5f})
    x.push_back(v);
  const std::vector<float> edges = exp_edges();
  x.insert(x.end(), edges.begin(), edges.end());
  x.push_back(3.0f);  // a tail of 1 after chunks of 4, 8 or 16 lanes
  const auto n = static_cast<std::int64_t>(x.size());
  te::Tensor X = te::placeholder("X", {n});
  te::Tensor Y = te::compute("Y", {n}, [&](te::Var i) { return te::exp(X(i)); });
  te::Schedule s({Y});
  s[Y].vectorize(Y.axis(0));
  te::CodegenOptions cg;
  cg.fast_exp = true;
  const te::LoweredFunc f = te::lower(s, "fast_exp_check");
  const std::string src = te::generate_cpp(f, cg);
  CHECK(src.find("mls_vexp_fast(") != std::string::npos);
  CHECK(src.find("mls_expf(") != std::string::npos);  // the scalar tail
  std::vector<float> y(x.size());
  const std::vector<std::span<float>> args = {x, y};
  te::compile(f, cg, quick_jit()).run(args, 1);
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("exp(" << x[i] << ") = " << y[i] << ", std::exp " << std::exp(x[i]));
    const float want = std::exp(x[i]);
    if (!check_exp_edge(x[i], y[i])) {
      const double ulp = std::nextafter(want, std::numeric_limits<float>::infinity()) - want;
      CHECK(std::fabs(static_cast<double>(y[i]) - want) <= 2 * ulp);
    }
  }
  // Without fast_exp the generated code calls expf, lane by lane (the interpreter's bits).
  CHECK(te::generate_cpp(f).find("mls_vexp(") != std::string::npos);
}

TEST_CASE("tune ops: the generated code's exp2 (fast_exp2) is the hand-written polynomial, within 2.5e-7 + 1e-7 |x|",
          "[tune_ops][exp]") {
  OpsEnv env;
  std::vector<float> x;
  mls::Rng rng(4, "exp2");
  for (int i = 0; i < 3000; ++i) x.push_back(static_cast<float>(rng.uniform(-87.3, 88.7)));
  for (int i = 0; i < 3000; ++i) x.push_back(static_cast<float>(rng.uniform(-4.0, 0.0)));  // softmax's x - max
  for (float v : {0.0f, -0.0f, 1.0f, -1.0f, 1e-8f, 88.0f, 88.72f, -87.0f, -87.33f, 0.5f * 0.6931472f, 20.5f})
    x.push_back(v);
  const std::vector<float> edges = exp_edges();
  x.insert(x.end(), edges.begin(), edges.end());
  x.push_back(-3.0f);  // a tail of 1 after chunks of 4, 8 or 16 lanes
  const auto n = static_cast<std::int64_t>(x.size());
  te::Tensor X = te::placeholder("X", {n});
  te::Tensor Y = te::compute("Y", {n}, [&](te::Var i) { return te::exp(X(i)); });
  te::Schedule s({Y});
  s[Y].vectorize(Y.axis(0));
  const te::LoweredFunc f = te::lower(s, "fast_exp2_check");
  te::CodegenOptions cg;
  cg.fast_exp2 = true;
  REQUIRE_THROWS_WITH(te::generate_cpp(f, cg), Catch::Contains("generate_cpp: CodegenOptions::fast_exp2 chooses "
                                                               "fast_exp's polynomial, but fast_exp is off"));
  cg.fast_exp = true;
  std::vector<float> poly(6);
  for (int k = 0; k < 6; ++k) poly[static_cast<std::size_t>(k)] = mls::kExp2Poly[k];
  for (int lanes : {4, 8, 16}) {
    if (lanes > te::resolved_vector_lanes({})) continue;
    cg.vector_lanes = lanes;
    const std::string src = te::generate_cpp(f, cg);
    CHECK(src.find("mls_exp2_reduced(") != std::string::npos);
    CHECK(src.find("mls_exp_reduced(") == std::string::npos);  // not Cephes' polynomial
    // The coefficients are mls::kExp2Poly's, as lab 4's exp2_16 evaluates them.
    for (float c : poly) CHECK(src.find(te::codegen_detail::c_float_literal(c)) != std::string::npos);
    std::vector<float> y(x.size());
    const std::vector<std::span<float>> args = {x, y};
    te::compile(f, cg, quick_jit()).run(args, 1);
    std::vector<float> rel;
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("lanes " << lanes << ": exp(" << x[i] << ") = " << y[i] << ", std::exp " << std::exp(x[i]));
      const double want = std::exp(static_cast<double>(x[i]));
      if (!check_exp_edge(x[i], y[i])) {
        const double err = std::fabs(static_cast<double>(y[i]) - want) / want;
        CHECK(err <= 2.5e-7 + 1e-7 * std::fabs(x[i]));  // t = x log2e rounds: ~6.5e-8 |x| seen
        if (x[i] >= -4.0f && x[i] <= 0.0f) CHECK(err <= 4e-7);  // softmax's range
      }
    }
  }
}

TEST_CASE("tune ops: reductions in lanes (fast_reduce) and prefetches equal the interpreter", "[tune_ops][fast_reduce]") {
  OpsEnv env;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // reduce_chains: 1 accumulator, or K of them (3: blocks of 3 chunks and chunks left over), at the
  // CPU's lanes, on rows of 1, a prime, a tail after whole blocks, exact blocks.
  for (int chains : {1, 3, 4})
  for (int lanes : {4, 8, 16}) {
    if (lanes > te::resolved_vector_lanes({})) continue;
    if (chains > 1 && lanes != te::resolved_vector_lanes({})) continue;
    for (std::int64_t C : {1, 3, 4, 17, 64, 100, 131}) {
      const std::int64_t R = 3;
      // Row sums, maxima and minima, each a serial loop over the row (the pattern fast_reduce takes).
      te::Tensor X = te::placeholder("X", {R, C});
      te::IterVar j1 = te::reduce_axis(C, "j1"), j2 = te::reduce_axis(C, "j2"), j3 = te::reduce_axis(C, "j3");
      te::Tensor S = te::compute("S", {R}, [&](te::Var i) { return te::sum(X(i, j1) * 2.0f, {j1}); });
      te::Tensor M = te::compute("M", {R}, [&](te::Var i) { return te::max_reduce(X(i, j2), {j2}); });
      te::Tensor N = te::compute("N", {R}, [&](te::Var i) { return te::min_reduce(X(i, j3), {j3}); });
      // Y: a vectorized loop reading X (the prefetches), its max update in lanes (vstore of a max).
      te::IterVar r = te::reduce_axis(R, "r");
      te::Tensor Y = te::compute("Y", {C}, [&](te::Var j) { return te::max_reduce(X(r, j) + 1.0f, {r}); });
      te::Schedule s({S, M, N, Y});
      s[Y].reorder({r, Y.axis(0)});
      s[Y].vectorize(Y.axis(0));
      const te::LoweredFunc f = te::lower(s, "fast_reduce_check");
      te::CodegenOptions cg;
      cg.vector_lanes = lanes;
      cg.fast_reduce = true;
      cg.prefetch = {{"X", 2 * C}};
      cg.reduce_chains = chains;
      const std::string src = te::generate_cpp(f, cg);
      INFO("lanes " << lanes << ", chains " << chains << ", C " << C << "\n" << src);
      const bool chunks = C >= 4;  // a loop of at least 4 lanes runs in lanes
      int w = lanes;  // the reduction's chunk (fewer lanes on a short row)
      while (w > 4 && w > C) w /= 2;
      const std::int64_t k = std::min<std::int64_t>(chains, C / w);
      CHECK((src.find("x " + std::to_string(k) + " accumulators") != std::string::npos) == (chunks && k > 1));
      CHECK((src.find("mls_hsum(mls_acc") != std::string::npos) == chunks);
      CHECK((src.find("mls_hmax(mls_acc") != std::string::npos) == chunks);
      CHECK((src.find("mls_hmin(mls_acc") != std::string::npos) == chunks);
      CHECK((src.find("mls_vmax_acc(mls_load") != std::string::npos) == chunks);
      CHECK((src.find("mls_prefetch(&X[") != std::string::npos) == chunks);
      CHECK(te::generate_cpp(f).find("mls_hsum") == std::string::npos);  // off by default
      cg.reduce_chains = 0;
      REQUIRE_THROWS_WITH(te::generate_cpp(f, cg), Catch::Contains("generate_cpp: reduce_chains 0 must be >= 1"));
      cg.reduce_chains = chains;
      // Random rows; row 1 has a NaN (max and min skip it) and an infinity, row 2 a -inf.
      std::vector<float> x(static_cast<std::size_t>(R * C));
      mls::Rng rng(static_cast<std::uint64_t>(C), "fast_reduce");
      for (auto& v : x) v = static_cast<float>(rng.uniform(-1, 1));
      x[static_cast<std::size_t>(C + C / 2)] = nan;
      if (C > 2) x[static_cast<std::size_t>(C)] = inf;
      x[static_cast<std::size_t>(2 * C + C - 1)] = -inf;
      std::vector<float> ws(R), wm(R), wn(R), wy(static_cast<std::size_t>(C)), gs(R), gm(R), gn(R),
          gy(static_cast<std::size_t>(C));
      te::Bindings b;
      b.bind(X, x).bind(S, ws).bind(M, wm).bind(N, wn).bind(Y, wy);
      te::interpret(f, b);
      const std::vector<std::span<float>> args = {x, gs, gm, gn, gy};
      te::compile(f, cg, quick_jit()).run(args, 1);
      for (std::int64_t i = 0; i < R; ++i) {
        INFO("row " << i);
        CHECK(std::memcmp(&gm[i], &wm[i], 4) == 0);  // max and min exactly (NaN skipped)
        CHECK(std::memcmp(&gn[i], &wn[i], 4) == 0);
        if (i == 0) {  // a sum in another order: within (C + 8) eps of sum |2x|
          double mag = 0;
          for (std::int64_t j = 0; j < C; ++j) mag += 2.0 * std::fabs(x[static_cast<std::size_t>(j)]);
          CHECK(std::fabs(gs[0] - ws[0]) <= static_cast<double>(C + 8) * 1.2e-7 * mag);
        } else {
          CHECK(std::isnan(gs[i]) == std::isnan(ws[i]));
        }
      }
      for (std::int64_t j = 0; j < C; ++j) CHECK(std::memcmp(&gy[j], &wy[j], 4) == 0);
    }
  }
}

TEST_CASE("tune ops: the passes over a row prefetch further apart (prefetch_pass_step), into L1 or L2, equal the interpreter",
          "[tune_ops][prefetch]") {
  OpsEnv env;
  const int lanes = te::resolved_vector_lanes({});
  // Two nests over X's rows, each a vectorized loop reading X (the second twice in one chunk): the
  // first prefetches at the distance, the second one step further, a chunk's tail at its loop's.
  for (std::int64_t C : {3, 16, 67}) {
    const std::int64_t R = 5, D = 2 * C, step = C;
    te::Tensor X = te::placeholder("X", {R, C});
    te::Tensor Y = te::compute("Y", {R, C}, [&](te::Var i, te::Var j) { return X(i, j) * 2.0f; });
    te::Tensor Z = te::compute("Z", {R, C}, [&](te::Var i, te::Var j) { return X(i, j) * X(i, j) + 1.0f; });
    te::Schedule s({Y, Z});
    s[Y].vectorize(Y.axis(1));
    s[Z].vectorize(Z.axis(1));
    const te::LoweredFunc f = te::lower(s, "prefetch_passes");
    te::CodegenOptions cg;
    cg.vector_lanes = lanes;
    cg.prefetch = {{"X", D}};
    const std::string plain = te::generate_cpp(f, cg);
    cg.prefetch_pass_step = step;
    const std::string src = te::generate_cpp(f, cg);
    INFO("C " << C << "\n" << src);
    auto has = [&](const std::string& text, std::int64_t d) {
      return text.find("], " + std::to_string(d) + ");") != std::string::npos;
    };
    const bool chunks = C >= 4;  // a loop shorter than 4 lanes stays scalar: no prefetch
    CHECK(has(plain, D) == chunks);
    CHECK_FALSE(has(plain, D + step));
    CHECK(has(src, D) == chunks);
    CHECK(has(src, D + step) == chunks);
    CHECK_FALSE(has(src, D + 2 * step));  // Z's two loads of X: one pass, one prefetch
    cg.prefetch_pass_step = -1;
    REQUIRE_THROWS_WITH(te::generate_cpp(f, cg), Catch::Contains("generate_cpp: prefetch_pass_step -1 must be >= 0"));
    cg.prefetch_pass_step = step;
    cg.prefetch_level = 3;
    REQUIRE_THROWS_WITH(te::generate_cpp(f, cg), Catch::Contains("generate_cpp: prefetch_level 3 is not 1 (L1) or 2 (L2)"));
    cg.prefetch_level = 2;  // into L2: the same distances, mls_prefetch_l2
    const std::string l2 = te::generate_cpp(f, cg);
    CHECK((l2.find("mls_prefetch_l2(&X[") != std::string::npos) == chunks);
    CHECK(l2.find("    mls_prefetch(&X[") == std::string::npos);
    CHECK(has(l2, D + step) == chunks);
    CHECK(src.find("mls_prefetch_l2(&X[") == std::string::npos);
    std::vector<float> x(static_cast<std::size_t>(R * C)), wy(x.size()), wz(x.size()), gy(x.size()), gz(x.size());
    mls::Rng rng(static_cast<std::uint64_t>(C), "prefetch_passes");
    for (auto& v : x) v = static_cast<float>(rng.uniform(-1, 1));
    te::Bindings b;
    b.bind(X, x).bind(Y, wy).bind(Z, wz);
    te::interpret(f, b);
    const std::vector<std::span<float>> args = {x, gy, gz};
    for (int level : {1, 2}) {
      cg.prefetch_level = level;
      std::fill(gy.begin(), gy.end(), 0.0f);
      std::fill(gz.begin(), gz.end(), 0.0f);
      te::compile(f, cg, quick_jit()).run(args, 1);
      CHECK(std::memcmp(gy.data(), wy.data(), 4 * x.size()) == 0);  // no reduction: the same bits
      CHECK(std::memcmp(gz.data(), wz.data(), 4 * x.size()) == 0);
    }
  }
  // The templates' knobs spread and pcache: a row's later passes prefetch `spread` rows further,
  // into L1 or L2; compiled with spread 0, 1, 2 on rows with a tail after the partials (67, 41) and without (64), at 1 and 2
  // threads, each equals the naive loops; spread is 0 and pcache 1 in the plan without a prefetch.
  // Plus one random shape per operator (rows 1-9, cols 1-200: rows shorter than the partials, whole
  // partials with or without a tail). Tolerance: require_matches's 8 (L + 8) eps of the largest output.
  std::vector<OpProblem> ps = {tune::row_problem(OpKind::Softmax, 5, 67), tune::row_problem(OpKind::Softmax, 4, 64),
                               tune::row_problem(OpKind::LayerNormFwd, 5, 67), tune::row_problem(OpKind::LayerNormFwd, 4, 64),
                               tune::row_problem(OpKind::LayerNormBwd, 7, 41), tune::row_problem(OpKind::LayerNormBwd, 4, 64)};
  mls::Rng shapes(28, "prefetch_spread_shapes");
  for (OpKind kind : {OpKind::Softmax, OpKind::LayerNormFwd, OpKind::LayerNormBwd})
    ps.push_back(tune::row_problem(kind, static_cast<long>(shapes.uniform(1, 10)), static_cast<long>(shapes.uniform(1, 201))));
  for (const OpProblem& p : ps) {
    const tune::OpArrays in = tune::make_op_arrays(p, 13);
    const Want want = naive(p, in);
    for (int spread : {0, 1, 2}) {
      OpKnobs k = OpSpace::full(p, 2).default_knobs();
      k["prefetch"] = 1;
      k["spread"] = spread;
      k["pcache"] = 1 + spread % 2;  // L1 and L2 both
      const std::string what = tune::op_name(p.kind) + " " + tune::to_string(p) + " " + tune::to_string(k);
      INFO(what);
      CHECK(tune::op_plan(p, k).at("spread") == spread);
      const tune::OpInstance inst = tune::instantiate_op(p, k);
      CHECK(inst.codegen.prefetch_pass_step == spread * p.cols);
      CHECK(inst.codegen.prefetch_level == 1 + spread % 2);
      const std::string src = te::generate_cpp(inst.func, inst.codegen);
      // The rows a parallel loop (a lambda run on the pool's threads): its buffers __restrict
      // pointers of its own, not references through the closure.
      CHECK(k.at("parallel") == 1);
      CHECK(src.find("float* const __restrict x_ = x;") != std::string::npos);
      const bool two_passes = src.find("], " + std::to_string((1 + spread) * p.cols) + ");") != std::string::npos;
      if (p.cols >= 64) CHECK((spread == 0 || two_passes));  // every default reads such a row in two vectorized passes
      const tune::CompiledOp op = tune::compile_op(p, k, quick_jit());
      for (int threads : {1, 2}) {
        tune::OpArrays got = in;
        op.run(got, threads);
        require_matches(p, got, want, what + ", threads " + std::to_string(threads));
      }
      k["prefetch"] = 0;
      CHECK(tune::op_plan(p, k).at("spread") == 0);
      CHECK(tune::op_plan(p, k).at("pcache") == 1);
    }
  }
}

TEST_CASE("tune ops: compute_at with other readers inside the loop, outputs at a loop, set_scope", "[tune_ops][te]") {
  using te::Tensor;
  using te::Var;
  const std::int64_t R = 5, C = 13;
  Tensor X = te::placeholder("X", {R, C});
  te::IterVar j1 = te::reduce_axis(C, "j1");
  Tensor M = te::compute("M", {R}, [&](Var i) { return te::max_reduce(X(i, j1), {j1}); });
  Tensor E = te::compute("E", {R, C}, [&](Var i, Var j) { return X(i, j) - M(i); });
  te::IterVar j2 = te::reduce_axis(C, "j2");
  Tensor S = te::compute("S", {R}, [&](Var i) { return te::sum(E(i, j2) + M(i), {j2}); });
  Tensor Y = te::compute("Y", {R, C}, [&](Var i, Var j) { return E(i, j) * S(i) + M(i); });
  std::vector<float> x(R * C), y(R * C), m(R), want(R * C);
  mls::Rng rng(1, "X");
  for (auto& v : x) v = static_cast<float>(rng.uniform(-1, 1));
  auto run = [&](te::Schedule& s, const std::vector<Tensor>& outs) {
    te::Bindings b;
    b.bind(X, x).bind(Y, y);
    if (outs.size() > 1) b.bind(M, m);
    te::interpret(te::lower(s, "f"), b);
  };
  {
    te::Schedule s({Y});
    run(s, {Y});
    want = y;
  }
  {  // M read by E, S and Y: computed at Y's row once E and S are computed there; E a local row.
    te::Schedule s({Y});
    s[S].compute_at(s[Y], Y.axis(0));
    s[E].compute_at(s[Y], Y.axis(0));
    s[E].set_scope(te::Scope::Local);
    s[M].compute_at(s[Y], Y.axis(0));
    const std::string nest = te::to_string(te::lower(s, "f"));
    INFO(nest);
    CHECK(nest.find("E = allocate((1, 13), local)") != std::string::npos);
    std::fill(y.begin(), y.end(), 0.0f);
    run(s, {Y});
    CHECK(y == want);
  }
  {  // M an output too, computed at Y's row (every row's M is computed at its row).
    te::Schedule s({Y, M});
    s[S].compute_at(s[Y], Y.axis(0));
    s[E].compute_at(s[Y], Y.axis(0));
    s[M].compute_at(s[Y], Y.axis(0));
    std::fill(y.begin(), y.end(), 0.0f);
    run(s, {Y, M});
    CHECK(y == want);
    for (std::int64_t r = 0; r < R; ++r) CHECK(m[r] == *std::max_element(x.begin() + r * C, x.begin() + (r + 1) * C));
  }
  te::Schedule s1({Y});
  REQUIRE_THROWS_WITH(s1[M].compute_at(s1[Y], Y.axis(0)),
                      Catch::Contains("compute_at: 'M' is also read by stage 'E'; compute_at needs a single consumer "
                                      "(or the other readers computed inside loop 'i' of 'Y' first)"));
  REQUIRE_THROWS_WITH(s1[Y].set_scope(te::Scope::Local), Catch::Contains("set_scope: 'Y' is an output of the schedule"));
  REQUIRE_THROWS_WITH(s1[E].set_scope(te::Scope::Shared), Catch::Contains("set_scope: shared scope for stage 'E'"));
  // A reader computed inside the loop that reads past the window computed there.
  Tensor Z = te::compute("Z", {R, C}, [&](Var i, Var j) { return X(i, j) * 2.0f; });
  Tensor W = te::compute("W", {R, C}, [&](Var i, Var j) { return Z(i, j) + Z(i, C - 1 - j); });
  Tensor V = te::compute("V", {R, C}, [&](Var i, Var j) { return W(i, j) + Z(i, j); });
  te::Schedule s2({V});
  s2[W].compute_at(s2[V], V.axis(1));
  s2[Z].compute_at(s2[V], V.axis(1));
  REQUIRE_THROWS_WITH(te::lower(s2, "f"), Catch::Contains("compute_at: stage 'W' reads 'Z' at"));
  // An output whose windows do not cover it.
  Tensor P = te::compute("P", {2 * R}, [&](Var i) { return X(i / 2, 0) + 1.0f; });
  Tensor Q = te::compute("Q", {R}, [&](Var i) { return P(te::Expr(i) * 2); });
  te::Schedule s3({Q, P});
  s3[P].compute_at(s3[Q], Q.axis(0));
  REQUIRE_THROWS_WITH(te::lower(s3, "f"), Catch::Contains("compute_at: output 'P' is computed at loop 'i' of 'Q', whose "
                                                          "windows (i*2 + [0, 1) in dimension 0) do not cover it"));
}

TEST_CASE("tune ops: the search on a synthetic cost, the database lookup of op records", "[tune_ops][search]") {
  const OpProblem p = tune::row_problem(OpKind::LayerNormFwd, 64, 1000);
  const OpSpace space = OpSpace::full(p, 2, 16);
  // A made-up cost: fastest at acc 2, fuse 1, hold 1, lanes 16, unroll 2, parallel 1.
  auto cost = [](const OpKnobs& k) {
    double c = 1.0 + 0.3 * std::abs(k.at("acc") - 2) + 0.5 * (1 - k.at("fuse")) + 0.2 * (1 - k.at("hold")) +
               0.1 * std::abs(std::log2(16.0 / k.at("lanes"))) + 0.1 * std::abs(k.at("unroll") - 2) +
               0.8 * (1 - k.at("parallel"));
    tune::OpTrial t;
    t.status = k.at("acc") == 1 ? tune::TrialStatus::CompileError : tune::TrialStatus::Ok;  // some refused
    t.seconds = c * 1e-3;
    t.gbs = 1.0 / c;
    return t;
  };
  for (tune::Strategy st : {tune::Strategy::Grid, tune::Strategy::Random, tune::Strategy::Guided}) {
    tune::OpTuneOptions o;
    o.strategy = st;
    o.trials = st == tune::Strategy::Grid ? 400 : 40;
    o.threads = 2;
    o.space = space;
    o.evaluate = cost;
    const tune::OpTuneResult r = tune::OpTuner(p, o).run();
    INFO(tune::to_string(st) << ": best " << tune::to_string(r.best));
    REQUIRE(r.found);
    CHECK(space.valid(r.best));
    std::set<std::string> keys;
    for (const auto& t : r.trials) CHECK(keys.insert(tune::op_plan_key(p, t.knobs)).second);  // no plan twice
    if (st == tune::Strategy::Guided) {
      CHECK(r.trials.front().knobs == space.default_knobs());
      CHECK(r.best_seconds <= 1.05e-3);
    }
    if (st == tune::Strategy::Grid) CHECK(r.best_seconds == Approx(1e-3));  // the whole space
  }
  // Records: this CPU, the shape, the thread count and the template; confirmed times first.
  auto rec = [&](const OpKnobs& k, double seconds, const std::string& cpu, int threads, bool confirmed,
                 const OpProblem& shape) {
    TuningRecord r = make_tuning_record(tune::op_name(shape.kind), tune::to_json(shape), threads,
                                        tune::op_schedule_json(shape.kind, k, confirmed), seconds, 1.0);
    r.cpu_key = cpu;
    return r;
  };
  const std::string me = jit::cpu_key();
  const int lanes = te::resolved_vector_lanes({});
  const OpKnobs d = OpSpace::full(p, 2, lanes).default_knobs();
  OpKnobs a = d, b = d, c = d;
  a["unroll"] = 2;
  b["unroll"] = 4;
  c["acc"] = 4;
  std::vector<TuningRecord> records = {rec(a, 2.0, me, 2, true, p), rec(b, 1.0, "other-cpu-1234", 2, true, p),
                                       rec(c, 0.5, me, 1, true, p), rec(c, 0.4, me, 2, true, tune::row_problem(OpKind::LayerNormFwd, 64, 999)),
                                       rec(d, 1.5, me, 2, false, p)};
  records.push_back(records[0]);
  records.back().op = "softmax";
  records.back().seconds = 0.1;
  auto best = tune::best_op_knobs(records, p, 2, me);
  REQUIRE(best);
  CHECK(*best == a);  // confirmed over the faster search time; other CPUs, shapes, ops, threads ignored
  records[0].schedule["measure"] = "search";
  best = tune::best_op_knobs(records, p, 2, me);
  REQUIRE(best);
  CHECK(*best == d);
  records[4].schedule["template"] = "layernorm_fwd.v0";
  records[0].schedule.erase("hold");
  CHECK_FALSE(tune::best_op_knobs(records, p, 2, me));
  CHECK(tune::best_op_knobs(records, p, 2, "other-cpu-1234"));
}

TEST_CASE("tune ops: each strategy tunes a tiny problem end to end, failures are recorded, never fatal",
          "[tune_ops][tuner]") {
  OpsEnv env;
  const OpProblem p = tune::row_problem(OpKind::Softmax, 33, 70);
  tune::MeasureOptions m;
  m.repeat = 1;
  m.batch_seconds = 1e-4;
  for (tune::Strategy st : {tune::Strategy::Grid, tune::Strategy::Random, tune::Strategy::Guided}) {
    tune::OpTuneOptions o;
    o.strategy = st;
    o.trials = 2;
    o.threads = 2;
    o.space = OpSpace::small(p, 2);
    o.measure = m;
    o.jit = quick_jit();
    o.confirm = 1;
    const tune::OpTuneResult r = tune::OpTuner(p, o).run();
    INFO(tune::to_string(st));
    REQUIRE(r.found);
    CHECK(o.space->valid(r.best));
    CHECK(r.best_gbs > 0);
    CHECK(r.anchor_seconds > 0);
    CHECK(r.confirmed.size() == 1);
  }
  const TuningScan scan = TuningDb(env.dir.file("tuning.jsonl")).scan();
  CHECK(scan.records.size() >= 6);
  for (const auto& r : scan.records) {
    CHECK(r.op == "softmax");
    CHECK(r.shape == tune::to_json(p));
    CHECK(r.threads == 2);
  }
  CHECK(tune::best_op_knobs(scan.records, p, 2, jit::cpu_key()));
  CHECK_FALSE(tune::best_op_knobs(scan.records, p, 2, "another-cpu"));
  // A compiler that does not exist: every candidate refused (compile-error), the run ends normally.
  tune::OpTuneOptions o;
  o.trials = 2;
  o.space = OpSpace::small(p, 1);
  o.measure = m;
  o.jit.compiler = "/nonexistent/c++";
  o.record = false;
  const tune::OpTuneResult r = tune::OpTuner(p, o).run();
  CHECK_FALSE(r.found);
  REQUIRE(r.trials.size() == 2);
  for (const auto& t : r.trials) {
    CHECK(t.status == tune::TrialStatus::CompileError);
    CHECK(t.message.find("/nonexistent/c++") != std::string::npos);
  }
  // The comparison with the peers gives positive speeds and the two ratio lines.
  const tune::CompiledOp op = tune::compile_op(p, OpSpace::small(p, 1).default_knobs(), quick_jit());
  const tune::OpComparison c = tune::compare_op(op, 1);
  CHECK(c.gbs > 0);
  CHECK(c.vs_copy > 0);
  CHECK(c.vs_hand > 0);
  // Each figure is of its program's best batch: the speeds and the ratios agree.
  CHECK(c.copy_gbs * c.vs_copy == Approx(c.gbs).epsilon(1e-9));
  CHECK(c.hand_gbs * c.vs_hand == Approx(c.gbs).epsilon(1e-9));
  const std::string lines = tune::op_ratio_lines(p, 1, c);
  CHECK(lines.find("ratio tuned_softmax_vs_copy_33x70_t1 ") == 0);
  CHECK(lines.find("\nratio tuned_softmax_vs_fused_33x70_t1 ") != std::string::npos);
  REQUIRE_THROWS_WITH(tune::OpTuner(p, [] {
                        tune::OpTuneOptions bad;
                        bad.trials = 0;
                        return bad;
                      }()).run(),
                      Catch::Contains("tune: trials 0 must be >= 1"));
}

TEST_CASE("tune ops: the registry's tuned row operators (MLS_ROWOPS=tuned) equal the hand-written kernels, and without a "
          "compiler fall back with one warning", "[tune_ops][rowops]") {
  OpsEnv env;
  tune::reset_tuned_rowops_state();
  tune::set_tuned_rowops_compile_options(quick_jit());
  const auto regs = mls::rowops_kernels();
  REQUIRE(std::any_of(regs.begin(), regs.end(), [](const mls::RowOpsKernel& k) { return k.name == "tuned"; }));
  mls::set_rowops_kernel("tuned");
  const mls::RowOpsKernel k = mls::rowops_kernel();
  REQUIRE(k.name == "tuned");
  // Tolerance: tune::op_error's 4 (L + 8) eps relative to the largest output, L the longest reduction
  // (cols, or rows for dweight/dbias): the two sides differ by their exp (each within a few ulp) and
  // the order of their float sums, each of which is off by at most about L eps.
  for (const OpProblem& shape : {tune::row_problem(OpKind::Softmax, 7, 67), tune::row_problem(OpKind::Softmax, 33, 256)}) {
    const long R = shape.rows, C = shape.cols;
    for (OpKind kind : {OpKind::Softmax, OpKind::LayerNormFwd, OpKind::LayerNormBwd}) {
      const OpProblem p = tune::row_problem(kind, R, C);
      tune::OpArrays got = tune::make_op_arrays(p, 21), want = got;
      INFO(tune::op_name(kind) << " " << tune::to_string(p));
      if (kind == OpKind::Softmax) {
        k.softmax(got.at("y").data(), got.at("x").data(), R, C);
        softmax_forward(want.at("y").data(), want.at("x").data(), R, C);
        CHECK(tune::op_error(p, got, want) <= 1.0);
        tune::OpArray inplace = got.at("x");  // out == inp
        k.softmax(inplace.data(), inplace.data(), R, C);
        got.at("y") = inplace;
        CHECK(tune::op_error(p, got, want) <= 1.0);
      } else if (kind == OpKind::LayerNormFwd) {
        k.layernorm_forward(got.at("out").data(), got.at("mean").data(), got.at("rstd").data(), got.at("x").data(),
                            got.at("weight").data(), got.at("bias").data(), R, C, 1e-5f);
        layernorm_forward(want.at("out").data(), want.at("mean").data(), want.at("rstd").data(), want.at("x").data(),
                          want.at("weight").data(), want.at("bias").data(), R, C, 1e-5f);
        CHECK(tune::op_error(p, got, want) <= 1.0);
      } else {
        // The gradients accumulate: dinp, dweight, dbias start as the _in arrays (not zero).
        for (auto* a : {&got, &want}) {
          (*a)["dinp"] = a->at("dinp_in");
          (*a)["dweight"] = a->at("dweight_in");
          (*a)["dbias"] = a->at("dbias_in");
        }
        auto args = [](tune::OpArrays& a) { return std::tuple{a.at("dinp").data(), a.at("dweight").data(), a.at("dbias").data()}; };
        auto [gx, gw, gb] = args(got);
        auto [wx, ww, wb] = args(want);
        k.layernorm_backward(gx, gw, gb, got.at("dout").data(), got.at("x").data(), got.at("weight").data(),
                             got.at("mean").data(), got.at("rstd").data(), R, C);
        layernorm_backward(wx, ww, wb, want.at("dout").data(), want.at("x").data(), want.at("weight").data(),
                           want.at("mean").data(), want.at("rstd").data(), R, C);
        CHECK(tune::op_error(p, got, want) <= 1.0);
      }
    }
  }
  CHECK(tune::tuned_rowops_compiled() == 6);  // three operators on two shapes
  CHECK(tune::tuned_rowops_fallbacks() == 0);
  CHECK(tune::tuned_rowops_last_warning().empty());

  // No compiler: the hand-written kernel (its very bits), one warning naming the operator and the shape.
  tune::reset_tuned_rowops_state();
  jit::CompileOptions none = quick_jit();
  none.compiler = "/nonexistent/c++";
  tune::set_tuned_rowops_compile_options(none);
  const OpProblem p = tune::row_problem(OpKind::Softmax, 5, 19);
  tune::OpArrays got = tune::make_op_arrays(p, 4), want = got;
  k.softmax(got.at("y").data(), got.at("x").data(), p.rows, p.cols);
  k.softmax(got.at("y").data(), got.at("x").data(), p.rows, p.cols);
  softmax_forward(want.at("y").data(), want.at("x").data(), p.rows, p.cols);
  CHECK(got.at("y") == want.at("y"));
  CHECK(tune::tuned_rowops_fallbacks() == 2);
  CHECK(tune::tuned_rowops_compiled() == 0);
  CHECK_THAT(tune::tuned_rowops_last_warning(),
             Catch::Contains("tuned rowops: warning: cannot compile softmax for 5x19 (") &&
                 Catch::Contains("using lab 4's hand-written kernel"));
  tune::reset_tuned_rowops_state();
  mls::set_rowops_kernel("");
  CHECK(mls::rowops_kernel().name == "fused");
}
