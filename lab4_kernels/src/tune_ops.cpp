// The operator templates' problems, knobs and knob spaces (mls/kernels/tune_ops.hpp): names, shapes
// and their JSON, the arrays of each operator, bytes and flops, knob checks and JSON, OpSpace and its
// SearchSpace, and the plan of knobs (what a template really uses). The templates themselves are in
// tune_ops_templates.cpp; measuring and tuning in tune_ops_measure.cpp.
#include <algorithm>
#include <cmath>

#include "mls/common/error.hpp"
#include "mls/kernels/tune_ops.hpp"

namespace mls::kernels::tune {

// ---- operators and problems ----------------------------------------------------------------------

std::vector<OpKind> op_kinds() {
  return {OpKind::Softmax, OpKind::LayerNormFwd, OpKind::LayerNormBwd, OpKind::AddMulAdd, OpKind::Conv2d};
}

std::string op_name(OpKind kind) {
  switch (kind) {
    case OpKind::Softmax: return "softmax";
    case OpKind::LayerNormFwd: return "layernorm_fwd";
    case OpKind::LayerNormBwd: return "layernorm_bwd";
    case OpKind::AddMulAdd: return "add_mul_add";
    case OpKind::Conv2d: return "conv2d";
  }
  return "?";
}

OpKind op_kind_from_string(std::string_view s) {
  for (OpKind k : op_kinds())
    if (s == op_name(k)) return k;
  fail("tune: unknown operator '", s, "' (softmax, layernorm_fwd, layernorm_bwd, add_mul_add, conv2d)");
}

namespace {
bool is_row_op(OpKind k) { return k == OpKind::Softmax || k == OpKind::LayerNormFwd || k == OpKind::LayerNormBwd; }
}  // namespace

// v2 of the row operators: the knob `prefetch` (records of v1 have none, and their times were taken
// with the code generation of before: the tuning database no longer offers them); v3 of
// layernorm_bwd: the knobs `onepass` and `colfuse`; v3 of softmax: the knob `expsum`; v4 of
// softmax: the knob `exp2`; v3 of layernorm_fwd: the knob `sqsum`; v5 of softmax, v4 of both
// layernorms: the knobs `spread` and `pcache`.
std::string op_template_id(OpKind kind) {
  if (kind == OpKind::Softmax) return op_name(kind) + ".v5";
  if (kind == OpKind::LayerNormBwd || kind == OpKind::LayerNormFwd) return op_name(kind) + ".v4";
  return op_name(kind) + (is_row_op(kind) ? ".v2" : ".v1");
}

OpProblem row_problem(OpKind kind, long rows, long cols) {
  MLS_CHECK(is_row_op(kind), "row_problem: ", op_name(kind), " is not a row operator (softmax, layernorm_fwd, "
            "layernorm_bwd)");
  OpProblem p;
  p.kind = kind;
  p.rows = rows;
  p.cols = cols;
  return p;
}

OpProblem elementwise_problem(long n) {
  OpProblem p;
  p.kind = OpKind::AddMulAdd;
  p.n = n;
  return p;
}

OpProblem conv2d_problem(long n, long c, long h, long w, long k, long kh, long stride, long pad) {
  OpProblem p;
  p.kind = OpKind::Conv2d;
  p.n = n;
  p.c = c;
  p.h = h;
  p.w = w;
  p.k = k;
  p.kh = kh;
  p.stride = stride;
  p.pad = pad;
  return p;
}

std::string to_string(const OpProblem& p) {
  if (is_row_op(p.kind)) return std::to_string(p.rows) + "x" + std::to_string(p.cols);
  if (p.kind == OpKind::AddMulAdd) return std::to_string(p.n);
  return "n" + std::to_string(p.n) + "_c" + std::to_string(p.c) + "_h" + std::to_string(p.h) + "_w" +
         std::to_string(p.w) + "_k" + std::to_string(p.k) + "_kh" + std::to_string(p.kh) + "_s" +
         std::to_string(p.stride) + "_p" + std::to_string(p.pad);
}

nlohmann::json to_json(const OpProblem& p) {
  if (is_row_op(p.kind)) return {{"rows", p.rows}, {"cols", p.cols}};
  if (p.kind == OpKind::AddMulAdd) return {{"n", p.n}};
  return {{"n", p.n}, {"c", p.c}, {"h", p.h}, {"w", p.w}, {"k", p.k}, {"kh", p.kh}, {"stride", p.stride},
          {"pad", p.pad}};
}

void check_problem(const OpProblem& p) {
  const std::string op = "tune " + op_name(p.kind) + ": ";
  constexpr long kMax = 1L << 31;
  auto positive = [&](const char* name, long v) {
    MLS_CHECK(v >= 1 && v <= kMax, op, name, " ", v, " must be in 1..", kMax);
  };
  if (is_row_op(p.kind)) {
    positive("rows", p.rows);
    positive("cols", p.cols);
    MLS_CHECK(p.rows * p.cols <= kMax, op, "rows x cols ", p.rows, " x ", p.cols, " is over ", kMax, " elements");
    MLS_CHECK(p.eps > 0 && std::isfinite(p.eps), op, "eps ", p.eps, " must be a positive number");
    return;
  }
  positive("n", p.n);
  if (p.kind == OpKind::AddMulAdd) return;
  positive("c", p.c);
  positive("h", p.h);
  positive("w", p.w);
  positive("k", p.k);
  positive("kh", p.kh);
  positive("stride", p.stride);
  MLS_CHECK(p.pad >= 0 && p.pad < p.kh, op, "pad ", p.pad, " must be in 0..kh - 1 (kh ", p.kh, ")");
  MLS_CHECK(p.kh <= p.h + 2 * p.pad && p.kh <= p.w + 2 * p.pad, op, "kernel ", p.kh, "x", p.kh,
            " is larger than the padded image ", p.h + 2 * p.pad, "x", p.w + 2 * p.pad);
  MLS_CHECK(p.n * p.c * p.h * p.w <= kMax && p.n * p.k * p.oh() * p.ow() <= kMax && p.k * p.c * p.kh * p.kh <= kMax,
            op, "an array of ", to_string(p), " is over ", kMax, " elements");
}

std::vector<OpArg> op_args(const OpProblem& p) {
  const long r = p.rows, c = p.cols;
  switch (p.kind) {
    case OpKind::Softmax: return {{"x", {r, c}, false}, {"y", {r, c}, true}};
    case OpKind::LayerNormFwd:
      return {{"x", {r, c}, false}, {"weight", {c}, false}, {"bias", {c}, false},
              {"out", {r, c}, true}, {"mean", {r}, true},    {"rstd", {r}, true}};
    case OpKind::LayerNormBwd:
      return {{"dinp_in", {r, c}, false}, {"dweight_in", {c}, false}, {"dbias_in", {c}, false},
              {"dout", {r, c}, false},    {"x", {r, c}, false},         {"weight", {c}, false},
              {"mean", {r}, false},       {"rstd", {r}, false},         {"dinp", {r, c}, true},
              {"dweight", {c}, true},     {"dbias", {c}, true}};
    case OpKind::AddMulAdd:
      return {{"a", {p.n}, false}, {"b", {p.n}, false}, {"c", {p.n}, false}, {"d", {p.n}, false}, {"e", {p.n}, true}};
    case OpKind::Conv2d:
      return {{"x", {p.n, p.c, p.h, p.w}, false}, {"w", {p.k, p.c, p.kh, p.kh}, false},
              {"y", {p.n, p.k, p.oh(), p.ow()}, true}};
  }
  return {};
}

double op_bytes(const OpProblem& p) {
  double floats = 0;
  for (const auto& a : op_args(p)) {
    double n = 1;
    for (auto d : a.shape) n *= static_cast<double>(d);
    floats += n;
  }
  return 4.0 * floats;
}

double op_flops(const OpProblem& p) {
  const double rc = static_cast<double>(p.rows) * static_cast<double>(p.cols);
  switch (p.kind) {
    case OpKind::Softmax: return 5.0 * rc;        // max, subtract, exp, sum, scale
    case OpKind::LayerNormFwd: return 7.0 * rc;   // sum, subtract, square-add, scale, weight, bias
    case OpKind::LayerNormBwd: return 16.0 * rc;  // xhat, dnorm, two row sums, dinp, dweight, dbias
    case OpKind::AddMulAdd: return 3.0 * static_cast<double>(p.n);
    case OpKind::Conv2d:
      return 2.0 * static_cast<double>(p.n) * static_cast<double>(p.k) * static_cast<double>(p.oh()) *
             static_cast<double>(p.ow()) * static_cast<double>(p.c) * static_cast<double>(p.kh * p.kh);
  }
  return 0;
}

// ---- knobs ----------------------------------------------------------------------------------------------

std::string to_string(const OpKnobs& k) {
  std::string s;
  for (const auto& [name, v] : k) s += (s.empty() ? "" : " ") + name + "=" + std::to_string(v);
  return s;
}

namespace {

int cpu_lanes(int lanes) { return lanes != 0 ? lanes : te::resolved_vector_lanes({}); }

/// Every knob of the template with every value it may take (lanes up to `lanes`).
std::vector<OpKnob> template_knobs(OpKind kind, int lanes) {
  std::vector<int> lane_values;
  for (int l : {4, 8, 16})
    if (l <= lanes) lane_values.push_back(l);
  std::vector<OpKnob> k = {{"lanes", lane_values, true}, {"parallel", {0, 1}, false}};
  switch (kind) {
    case OpKind::Softmax:
    case OpKind::LayerNormFwd:
    case OpKind::LayerNormBwd:
      k.push_back({"acc", {0, 1, 2, 4}, true});
      if (kind == OpKind::Softmax) {
        k.push_back({"expsum", {0, 1}, false});
        k.push_back({"exp2", {0, 1}, false});
      }
      k.push_back({"fuse", {0, 1}, false});
      k.push_back({"hold", {0, 1}, false});
      k.push_back({"unroll", {1, 2, 4}, true});
      k.push_back({"stream", {0, 1}, false});
      k.push_back({"prefetch", {0, 1, 2, 4}, true});
      k.push_back({"spread", {0, 1, 2}, true});
      k.push_back({"pcache", {1, 2}, false});
      if (kind == OpKind::LayerNormFwd) k.push_back({"sqsum", {0, 1}, false});
      if (kind == OpKind::LayerNormBwd) {
        k.push_back({"blocks", {1, 2, 4, 8, 16, 32, 64}, true});
        k.push_back({"onepass", {0, 1}, false});
        k.push_back({"colfuse", {0, 1}, false});
      }
      break;
    case OpKind::AddMulAdd:
      k.push_back({"block", {1024, 4096, 16384, 65536}, true});
      k.push_back({"unroll", {1, 2, 4}, true});
      k.push_back({"stream", {0, 1}, false});
      break;
    case OpKind::Conv2d:
      k.push_back({"order", {0, 1}, false});
      k.push_back({"pad_copy", {0, 1}, false});
      k.push_back({"ob", {1, 2, 4}, true});
      break;
  }
  return k;
}

/// The hand-picked schedule of each template at `threads` threads: the value wanted for each knob
/// (the space's nearest is taken). Prefetch distances as measured on a Zen 5 (4096 x 1024, one
/// thread): 2 rows for softmax and layernorm forward (one row stream), 1 for layernorm backward
/// (three row streams: 2 rows ahead of each overflow L1 with the rows in use). Outputs of 16 MiB or more are streamed, as the hand-written
/// kernels stream them (fused.hpp). Spread 1: a row's second pass prefetches one row further than
/// its first (measured on the same Zen 5, one thread: 5-20% over spread 0 for all three). Softmax
/// prefetches into L2 (pcache 2: 2-6% over L1 there), the layernorms into L1 (L2: 8-13% slower).
OpKnobs template_default(const OpProblem& p, int lanes, int threads) {
  const int par = threads > 1 ? 1 : 0;
  const int stream = 4.0 * static_cast<double>(p.kind == OpKind::AddMulAdd ? p.n : p.rows * p.cols) >= 16.0 * (1 << 20);
  switch (p.kind) {
    case OpKind::Softmax:
      return {{"lanes", lanes}, {"parallel", par}, {"acc", 2},         {"fuse", 1},     {"hold", 1},
              {"unroll", 1},    {"stream", stream}, {"prefetch", 2},   {"expsum", 1},
              {"exp2", 1},      {"spread", 1},    {"pcache", 2}};
    case OpKind::LayerNormFwd:
      return {{"lanes", lanes}, {"parallel", par}, {"acc", 2},         {"fuse", 1},
              {"hold", 1},      {"unroll", 1},     {"stream", stream}, {"prefetch", 2},
              {"sqsum", 1},     {"spread", 1},     {"pcache", 1}};
    case OpKind::LayerNormBwd:
      return {{"lanes", lanes},   {"parallel", par}, {"acc", 2},      {"fuse", 1},       {"hold", 0},
              {"unroll", 1},      {"stream", stream}, {"prefetch", 1}, {"blocks", threads}, {"onepass", 1},
              {"colfuse", 1},     {"spread", 1},     {"pcache", 1}};
    case OpKind::AddMulAdd:
      return {{"lanes", lanes}, {"parallel", par}, {"block", 16384}, {"unroll", 2}, {"stream", stream}};
    case OpKind::Conv2d: return {{"lanes", lanes}, {"parallel", par}, {"order", 1}, {"pad_copy", 1}, {"ob", 1}};
  }
  return {};
}

}  // namespace

void check_op_knobs(const OpProblem& p, const OpKnobs& k, int lanes) {
  const std::string op = op_name(p.kind) + " knobs: ";
  lanes = cpu_lanes(lanes);
  const std::vector<OpKnob> all = template_knobs(p.kind, 16);
  for (const auto& [name, v] : k) {
    const auto it = std::find_if(all.begin(), all.end(), [&](const OpKnob& x) { return x.name == name; });
    std::string names;
    for (const auto& x : all) names += (names.empty() ? "" : ", ") + x.name;
    MLS_CHECK(it != all.end(), op, "unknown knob '", name, "' (the ", op_template_id(p.kind), " knobs: ", names, ")");
    std::string values;
    for (int x : it->values) values += (values.empty() ? "" : ", ") + std::to_string(x);
    MLS_CHECK(std::find(it->values.begin(), it->values.end(), v) != it->values.end(), op, name, " ", v,
              " is not one of ", values);
    MLS_CHECK(name != "lanes" || v <= lanes, op, "lanes ", v, " is more than the ", lanes, " lanes of this CPU");
  }
  for (const auto& x : all) MLS_CHECK(k.count(x.name), op, "knob '", x.name, "' is missing in {", to_string(k), "}");
}

nlohmann::json op_knobs_to_json(OpKind kind, const OpKnobs& k) {
  nlohmann::json j = {{"template", op_template_id(kind)}};
  for (const auto& [name, v] : k) j[name] = v;
  return j;
}

OpKnobs op_knobs_from_json(OpKind kind, const nlohmann::json& j) {
  const std::string op = op_name(kind) + " knobs: ";
  MLS_CHECK(j.is_object(), op, "expected a JSON object, got ", j.dump());
  MLS_CHECK(j.contains("template") && j.at("template").is_string() &&
                j.at("template").get<std::string>() == op_template_id(kind),
            op, "template ", j.contains("template") ? j.at("template").dump() : std::string("(missing)"), " is not '",
            op_template_id(kind), "'");
  OpKnobs k;
  for (const auto& [name, v] : j.items()) {
    if (name == "template" || name == "measure") continue;
    MLS_CHECK(v.is_number_integer(), op, "knob '", name, "' must be an integer, got ", v.dump());
    const auto x = v.get<std::int64_t>();
    MLS_CHECK(x >= -(1 << 30) && x <= (1 << 30), op, "knob '", name, "' ", x, " is out of range");
    k[name] = static_cast<int>(x);
  }
  const std::vector<OpKnob> all = template_knobs(kind, 16);
  for (const auto& [name, v] : k)
    MLS_CHECK(std::any_of(all.begin(), all.end(), [&](const OpKnob& x) { return x.name == name; }), op,
              "unknown knob '", name, "' in ", j.dump());
  for (const auto& x : all) MLS_CHECK(k.count(x.name), op, "knob '", x.name, "' is missing in ", j.dump());
  return k;
}

OpKnobs op_plan(const OpProblem& p, const OpKnobs& k) {
  OpKnobs q = k;
  auto get = [&](const char* name) { return q.count(name) ? q.at(name) : 0; };
  if (is_row_op(p.kind)) {
    const long w = static_cast<long>(get("acc")) * get("lanes");
    if (w > 0 && p.cols / w == 0) q["acc"] = 0;        // a row shorter than the partials: scalar
    if (get("acc") == 0 || p.cols / w <= 1) q["unroll"] = 1;  // no loop over jo to unroll
    if (p.kind != OpKind::Softmax && get("fuse") == 0) q["hold"] = 0;  // the tiles serve the fused nest
    if (get("prefetch") == 0) {  // no prefetch to spread or place
      q["spread"] = 0;
      q["pcache"] = 1;
    }
    if (p.kind == OpKind::Softmax) {  // exp and sum in one pass: a held row, partials and no tail after them
      const long wa = static_cast<long>(get("acc")) * get("lanes");
      if (!get("hold") || get("acc") == 0 || p.cols % wa != 0) q["expsum"] = 0;
    }
    if (p.kind == OpKind::LayerNormFwd) {  // x - mean and its squares' sum in one pass: as expsum
      const long wa = static_cast<long>(get("acc")) * get("lanes");
      if (!get("hold") || get("acc") == 0 || p.cols % wa != 0) q["sqsum"] = 0;
    }
    if (p.kind == OpKind::LayerNormBwd) {
      if (get("blocks") > p.rows) q["blocks"] = static_cast<int>(p.rows);
      if (get("acc") == 0) q["onepass"] = 0;  // no lane-wise partials to compute together
      const long want = std::max(1, get("blocks")), rb = (p.rows + want - 1) / want;
      if (p.rows % rb != 0) q["colfuse"] = 0;  // the output's row loop splits into the blocks only where rb divides it
    }
  } else if (p.kind == OpKind::AddMulAdd) {
    if (get("block") > p.n) q["block"] = static_cast<int>(std::min<long>(p.n, 1L << 30));
  } else if (p.kind == OpKind::Conv2d) {
    if (p.pad == 0) q["pad_copy"] = 0;
    if (get("ob") > p.k) q["ob"] = static_cast<int>(p.k);
  }
  return q;
}

std::string op_plan_key(const OpProblem& p, const OpKnobs& k) { return to_string(op_plan(p, k)); }

// ---- the space ----------------------------------------------------------------------------------------

OpSpace OpSpace::full(const OpProblem& problem, int threads, int lanes) {
  check_problem(problem);
  MLS_CHECK(threads >= 1, "OpSpace::full: threads ", threads, " must be >= 1");
  OpSpace s;
  s.problem = problem;
  s.threads = threads;
  s.lanes = cpu_lanes(lanes);
  MLS_CHECK(s.lanes == 4 || s.lanes == 8 || s.lanes == 16, "OpSpace: lanes ", s.lanes, " is not 4, 8 or 16");
  s.knobs = template_knobs(problem.kind, s.lanes);
  for (auto& k : s.knobs) {
    if (k.name == "parallel" && threads == 1) k.values = {0};  // nothing to run in parallel
    if (k.name != "blocks") continue;
    // Blocks of rows for the column sums: 1 at one thread, else 1 to 4 per thread.
    std::vector<int> v;
    for (int b : k.values)
      if (threads == 1 ? b == 1 : (b >= threads && b <= 4 * threads)) v.push_back(b);
    k.values = v.empty() ? std::vector<int>{k.values.back()} : v;
  }
  return s;
}

OpSpace OpSpace::small(const OpProblem& problem, int threads, int lanes) {
  OpSpace s = full(problem, threads, lanes);
  for (auto& k : s.knobs) {
    if (k.name == "lanes") k.values = {std::min(8, s.lanes)};
    else if (k.name == "acc") k.values = {0, 2};
    else if (k.name == "unroll") k.values = {1, 2};
    else if (k.name == "blocks") k.values = {k.values.front()};
    else if (k.name == "block") k.values = {1024, 4096};
    else if (k.name == "stream") k.values = {1};
    else if (k.name == "prefetch") k.values = {2};
    else if (k.name == "spread") k.values = {1};
    else if (k.name == "pcache") k.values = {1};
    else if (k.name == "onepass") k.values = {1};
    else if (k.name == "exp2" || k.name == "sqsum") k.values = {1};
    else if (k.name == "parallel") k.values = {threads > 1 ? 1 : 0};
    else if (k.name == "ob") k.values = {1, 2};
  }
  return s;
}

std::size_t OpSpace::cross_size() const {
  std::size_t n = 1;
  for (const auto& k : knobs) n *= k.values.size();
  return n;
}

OpKnobs OpSpace::at(std::size_t index) const {
  MLS_CHECK(index < cross_size(), "OpSpace::at: index ", index, " is past the ", cross_size(), " points");
  OpKnobs k;
  for (std::size_t d = knobs.size(); d-- > 0;) {
    k[knobs[d].name] = knobs[d].values[index % knobs[d].values.size()];
    index /= knobs[d].values.size();
  }
  return k;
}

std::vector<OpKnobs> OpSpace::enumerate() const {
  std::vector<OpKnobs> out;
  for (std::size_t i = 0; i < cross_size(); ++i) out.push_back(at(i));
  return out;
}

bool OpSpace::valid(const OpKnobs& k) const {
  if (k.size() != knobs.size()) return false;
  for (const auto& x : knobs) {
    const auto it = k.find(x.name);
    if (it == k.end() || std::find(x.values.begin(), x.values.end(), it->second) == x.values.end()) return false;
  }
  return true;
}

OpKnobs OpSpace::default_knobs() const {
  check();
  const OpKnobs want = template_default(problem, lanes, threads);
  OpKnobs k;
  for (const auto& x : knobs) {
    const int w = want.count(x.name) ? want.at(x.name) : x.values.front();
    int best = x.values.front();
    for (int v : x.values)
      if (std::abs(v - w) < std::abs(best - w)) best = v;
    k[x.name] = best;
  }
  return k;
}

OpKnobs OpSpace::knobs_at(const Point& p) const {
  MLS_CHECK(p.size() == knobs.size(), "OpSpace: a point of ", op_name(problem.kind), "'s space has ", knobs.size(),
            " indices, got ", p.size());
  OpKnobs k;
  for (std::size_t d = 0; d < knobs.size(); ++d) {
    MLS_CHECK(p[d] >= 0 && static_cast<std::size_t>(p[d]) < knobs[d].values.size(), "OpSpace: index ", p[d],
              " of knob '", knobs[d].name, "' is not in 0..", knobs[d].values.size() - 1);
    k[knobs[d].name] = knobs[d].values[static_cast<std::size_t>(p[d])];
  }
  return k;
}

Point OpSpace::point_of(const OpKnobs& k) const {
  Point p;
  for (const auto& x : knobs) {
    const auto it = k.find(x.name);
    MLS_CHECK(it != k.end(), "OpSpace: knob '", x.name, "' is missing in {", to_string(k), "}");
    const auto v = std::find(x.values.begin(), x.values.end(), it->second);
    MLS_CHECK(v != x.values.end(), "OpSpace: knob '", x.name, "' has no value ", it->second, " in this space");
    p.push_back(static_cast<int>(v - x.values.begin()));
  }
  return p;
}

SearchSpace OpSpace::search_space() const {
  check();
  SearchSpace s;
  for (const auto& k : knobs) s.dims.push_back({k.name, static_cast<int>(k.values.size()), k.ordered});
  const OpSpace self = *this;
  s.key = [self](const Point& p) { return op_plan_key(self.problem, self.knobs_at(p)); };
  s.default_point = point_of(default_knobs());
  return s;
}

void OpSpace::check() const {
  MLS_CHECK(!knobs.empty(), "OpSpace: ", op_name(problem.kind), " has no knobs");
  for (const auto& k : knobs) {
    MLS_CHECK(!k.values.empty(), "OpSpace: knob '", k.name, "' has no values");
    for (int v : k.values) {
      OpKnobs one = template_default(problem, lanes, threads);
      one[k.name] = v;
      if (one.count("lanes") && one.at("lanes") > lanes) one["lanes"] = lanes;
      if (k.name == "lanes") MLS_CHECK(v <= lanes, "OpSpace: lanes ", v, " is more than the space's ", lanes);
      check_op_knobs(problem, one, lanes);
    }
  }
}

}  // namespace mls::kernels::tune
