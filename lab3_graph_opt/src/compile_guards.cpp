// Student file of lab 3: write the bodies between the SOLUTION markers (mls-grader grades this file).
// compile()'s guards: the signature of a call and the check that a compiled version still fits it
// (the torch.compile lesson: a compiled graph is only valid under the assumptions it was traced with).
#include <cstdio>
#include <cstring>
#include <sstream>

#include "mls/graph_opt/compile.hpp"

namespace mls::graph_opt {

std::string Signature::str() const {
  std::ostringstream os;
  os << "(";
  for (std::size_t i = 0; i < inputs.size(); ++i)
    os << (i ? ", " : "") << inputs[i].dtype << " " << shape_str(inputs[i].shape) << (inputs[i].requires_grad ? " grad" : "");
  os << ") grad_mode=" << (grad_mode ? 1 : 0);
  return os.str();
}

std::uint64_t tensor_checksum(const Tensor& t) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
  auto mix = [&h](const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  const int dt = static_cast<int>(t.dtype());
  mix(&dt, sizeof dt);
  for (std::int64_t d : t.shape()) mix(&d, sizeof d);
  const Tensor c = t.compact();
  mix(c.data_ptr(), static_cast<std::size_t>(c.numel()) * itemsize(c.dtype()));
  return h;
}

namespace {
/// "0x1f2e..." for guard messages.
[[maybe_unused]] std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

/// The signature of a call (compile.hpp). Hint: one InputSpec per input, from Var::shape(),
/// Var::dtype() and Var::requires_grad(); an undefined input is an error naming its index.
Signature signature_of(const std::vector<Var>& inputs, bool grad_mode) {
  // BEGIN SOLUTION
  Signature s;
  s.grad_mode = grad_mode;
  s.inputs.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    MLS_CHECK(inputs[i].defined(), "compile: input ", i, " is an undefined Var");
    s.inputs.push_back({inputs[i].shape(), inputs[i].dtype(), inputs[i].requires_grad()});
  }
  return s;
  // END SOLUTION
}

/// The first guard that fails (compile.hpp lists them in order, with their wording), or "".
/// Hint: compare the signatures field by field, then each capture's node (its current value, and
/// for a frozen constant the storage and offset it holds, then tensor_checksum).
std::string check_guards(const Signature& compiled, const std::vector<Capture>& captures, const Signature& now) {
  // BEGIN SOLUTION
  std::ostringstream os;
  if (compiled.grad_mode != now.grad_mode) {
    os << "grad_mode: " << compiled.grad_mode << " compiled, " << now.grad_mode << " now";
    return os.str();
  }
  if (compiled.inputs.size() != now.inputs.size()) {
    os << "number of inputs: " << compiled.inputs.size() << " compiled, " << now.inputs.size() << " now";
    return os.str();
  }
  for (std::size_t i = 0; i < now.inputs.size(); ++i) {
    const InputSpec& a = compiled.inputs[i];
    const InputSpec& b = now.inputs[i];
    if (a.shape != b.shape) os << "input " << i << ": shape " << shape_str(a.shape) << " compiled, " << shape_str(b.shape) << " now";
    else if (a.dtype != b.dtype) os << "input " << i << ": dtype " << a.dtype << " compiled, " << b.dtype << " now";
    else if (a.requires_grad != b.requires_grad)
      os << "input " << i << ": requires_grad " << a.requires_grad << " compiled, " << b.requires_grad << " now";
    if (!os.str().empty()) return os.str();
  }
  for (const Capture& c : captures) {
    const Node& n = *c.node;
    if (n.value.shape() != c.shape) os << c.name << ": shape " << shape_str(c.shape) << " compiled, " << shape_str(n.value.shape()) << " now";
    else if (n.value.dtype() != c.dtype) os << c.name << ": dtype " << c.dtype << " compiled, " << n.value.dtype() << " now";
    else if (c.as_input && !n.requires_grad) os << c.name << ": no longer requires grad";
    else if (!c.as_input && (n.value.storage() != c.value.storage() || n.value.offset() != c.value.offset() ||
                             n.value.strides() != c.value.strides()))
      os << c.name << ": replaced by another tensor";
    else if (!c.as_input) {
      const std::uint64_t sum = tensor_checksum(n.value);
      if (sum != c.checksum) os << c.name << ": changed in place (checksum " << hex(c.checksum) << " compiled, " << hex(sum) << " now)";
    }
    if (!os.str().empty()) return os.str();
  }
  return "";
  // END SOLUTION
}

}  // namespace mls::graph_opt
