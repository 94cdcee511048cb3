// The JSON file format of lab 3 programs (format "mls-graph", version 1):
//   {"format": "mls-graph", "version": 1,
//    "nodes": [{"op": "placeholder", "name": "x", "shape": [2, 3], "dtype": "float32", "inputs": []},
//              {"op": "constant", "shape": [], "dtype": "float32", "value": [2.0], "inputs": []},
//              {"op": "mul", "inputs": [0, 1], "attrs": {}, "shape": [2, 3], "dtype": "float32"}],
//    "inputs": [0], "outputs": [2]}
// Node references are indices into "nodes"; attributes are integers, reals, integer lists or
// string lists (a fused_elementwise node's "code": ["add 0 1", "exp 2"], ops by name).
#include <nlohmann/json.hpp>

#include "mls/common/file.hpp"
#include "mls/graph_opt/ir.hpp"

namespace mls::graph_opt {

using json = nlohmann::ordered_json;

std::string to_json(const Program& p) {
  std::unordered_map<const Node*, std::size_t> idx;
  for (std::size_t i = 0; i < p.graph->nodes().size(); ++i) idx[p.graph->nodes()[i].get()] = i;
  json nodes = json::array();
  for (const NodePtr& n : p.graph->nodes()) {
    MLS_CHECK(n->op != Op::Cond && n->op != Op::WhileLoop && n->op != Op::CondGrad && n->op != Op::WhileGrad, "to_json: node ",
              node_ref(p, n.get()), " (", autodiff::op_name(n->op),
              ") holds sub-graphs, which the JSON format (mls-graph version 1) does not support; control flow "
              "cannot be saved");
    json j;
    j["op"] = autodiff::op_name(n->op);
    if (!n->name.empty()) j["name"] = n->name;
    json ins = json::array();
    for (const NodePtr& in : n->inputs) ins.push_back(idx.at(in.get()));
    j["inputs"] = ins;
    json attrs = json::object();
    for (const auto& [k, v] : n->attrs.items())
      std::visit([&, &key = k](const auto& x) { attrs[key] = x; }, v);
    j["attrs"] = attrs;
    j["shape"] = n->shape;
    j["dtype"] = std::string(dtype_name(n->dtype));
    if (n->op == Op::Constant || n->op == Op::Variable) j["value"] = n->value.to(DType::Float64).compact().to_vector<double>();
    nodes.push_back(std::move(j));
  }
  json doc;
  doc["format"] = "mls-graph";
  doc["version"] = 1;
  doc["nodes"] = nodes;
  json ins = json::array(), outs = json::array();
  for (const Var& v : p.inputs) ins.push_back(idx.at(v.get()));
  for (const Var& v : p.outputs) outs.push_back(idx.at(v.get()));
  doc["inputs"] = ins;
  doc["outputs"] = outs;
  return doc.dump(1);
}

namespace {
const json& field(const json& j, const char* key, std::size_t node) {
  MLS_CHECK(j.is_object() && j.contains(key), "load: node ", node, " has no field '", key, "'");
  return j.at(key);
}
std::size_t index_in(const json& v, std::size_t count, const std::string& what) {
  MLS_CHECK(v.is_number_integer(), "load: ", what, " must be a node index, got ", v.dump());
  const auto i = v.get<std::int64_t>();
  MLS_CHECK(i >= 0 && static_cast<std::size_t>(i) < count, "load: ", what, " refers to node ", i, ", the file has ",
            count, " nodes");
  return static_cast<std::size_t>(i);
}
}  // namespace

Program from_json(const std::string& text) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    fail("load: malformed JSON: ", e.what());
  }
  MLS_CHECK(doc.is_object() && doc.value("format", "") == "mls-graph", "load: not an mls-graph file (no \"format\": \"mls-graph\")");
  MLS_CHECK(doc.value("version", 0) == 1, "load: unsupported version ", doc.value("version", 0), ", expected 1");
  MLS_CHECK(doc.contains("nodes") && doc["nodes"].is_array(), "load: no \"nodes\" array");
  const json& nodes = doc["nodes"];
  const std::size_t count = nodes.size();
  Program p;
  std::vector<NodePtr> made;
  try {
    // Two phases, so that a file may reference a later node (and a cycle reaches the verifier).
    for (std::size_t i = 0; i < count; ++i) {
      const json& j = nodes[i];
      auto n = std::make_shared<Node>();
      const json& op = field(j, "op", i);
      MLS_CHECK(op.is_string(), "load: node ", i, ": \"op\" must be a string");
      try {
        n->op = autodiff::op_from_name(op.get<std::string>());
      } catch (const Error& e) {
        fail("load: node ", i, ": ", e.what());
      }
      n->name = j.value("name", "");
      n->shape = field(j, "shape", i).get<Shape>();
      n->dtype = parse_dtype(field(j, "dtype", i).get<std::string>());
      if (j.contains("attrs")) {
        MLS_CHECK(j["attrs"].is_object(), "load: node ", i, ": \"attrs\" must be an object");
        for (const auto& [k, v] : j["attrs"].items()) {
          if (v.is_number_integer()) n->attrs.set(k, v.get<std::int64_t>());
          else if (v.is_number_float()) n->attrs.set(k, v.get<double>());
          else if (v.is_array() && !v.empty() && v[0].is_string()) n->attrs.set(k, v.get<std::vector<std::string>>());
          else if (v.is_array()) n->attrs.set(k, v.get<std::vector<std::int64_t>>());
          else fail("load: node ", i, ": attribute '", k, "' must be an integer, a real, a list of integers or a list of strings");
        }
      }
      if (n->op == Op::Constant || n->op == Op::Variable) {
        const auto vals = field(j, "value", i).get<std::vector<double>>();
        std::int64_t numel = 1;
        for (std::int64_t d : n->shape) numel *= d;
        MLS_CHECK(static_cast<std::int64_t>(vals.size()) == numel, "load: node ", i, ": ", vals.size(),
                  " values for shape ", shape_str(n->shape));
        n->value = Tensor::from_vector<double>(vals, n->shape).to(n->dtype);
      }
      made.push_back(n);
    }
    for (std::size_t i = 0; i < count; ++i)
      for (const json& in : field(nodes[i], "inputs", i))
        made[i]->inputs.push_back(made[index_in(in, count, "an input of node " + std::to_string(i))]);
    for (const NodePtr& n : made) p.graph->add(n);
    for (const json& v : doc.value("inputs", json::array())) p.inputs.emplace_back(made[index_in(v, count, "an input")]);
    for (const json& v : doc.value("outputs", json::array())) p.outputs.emplace_back(made[index_in(v, count, "an output")]);
  } catch (const json::exception& e) {
    fail("load: malformed graph: ", e.what());
  }
  try {
    verify(p);
  } catch (...) {
    for (const NodePtr& n : made) n->inputs.clear();  // break cycles so the nodes are freed
    throw;
  }
  return p;
}

void save_json(const Program& p, const std::string& path) { write_file_atomic(path, to_json(p), "save_json"); }

Program load_json_file(const std::string& path) { return from_json(read_file(path, "load")); }

}  // namespace mls::graph_opt
