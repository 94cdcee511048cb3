// The link audit's pure functions (issue 25): nm's listing parsed, the scope of a mangled name,
// and the rules a student object's symbols are held to.
#include <catch2/catch.hpp>

#include "mls/grader/link_audit.hpp"

using namespace mls::grader;

namespace {
LinkAuditContext lab1_context() {
  LinkAuditContext c;
  c.allowed = {"_ZN3mls6tensor6matmulERKNS0_6TensorES3_", "DW.ref.__gxx_personality_v0"};
  c.lab_keys = {"mls::tensor"};
  c.others = {"_ZN3mls6tensor6detail5inl_aEv", "_ZNK3mls6tensor6Tensor5shapeEv", "_ZN3ref11same_valuesEv"};
  c.test_defined = {"_Z11test_helperv"};
  c.test_keys = {"ref"};
  return c;
}
std::vector<std::string> audit(const std::string& name, char type) {
  return audit_student_object("lab1_tensor/src/matmul.cpp", {{name, type}}, lab1_context());
}
}  // namespace

TEST_CASE("link audit: nm -P -A output is read by file, archive members included", "[grader][link_audit]") {
  auto m = parse_nm("obj/a.o: write T 245 262\nobj/a.o: _Znwm U\nlib.a[b.o]: _ZN3mls3fooEv W 0 1\nnoise\n");
  REQUIRE(m.size() == 2);
  REQUIRE(m["obj/a.o"].size() == 2);
  CHECK(m["obj/a.o"][0].name == "write");
  CHECK(m["obj/a.o"][0].type == 'T');
  CHECK(m["lib.a[b.o]"][0].type == 'W');
  CHECK(symbol_role('T') == SymbolRole::Strong);
  CHECK(symbol_role('W') == SymbolRole::Weak);
  CHECK(symbol_role('u') == SymbolRole::Weak);
  CHECK(symbol_role('U') == SymbolRole::Undefined);
  CHECK(symbol_role('t') == SymbolRole::Local);
}

TEST_CASE("link audit: the scope of a mangled name, special names and std abbreviations included", "[grader][link_audit]") {
  CHECK(scope_key(symbol_scope("_ZN3mls6tensor6matmulERKNS0_6TensorES3_")) == "mls::tensor");
  CHECK(scope_key(symbol_scope("_ZNK3mls6tensor6Tensor5shapeEv")) == "mls::tensor");
  CHECK(scope_key(symbol_scope("_ZZN3mls7testing16observation_sinkEvE4sink")) == "mls::testing");
  CHECK(scope_key(symbol_scope("_ZTVN3mls5ErrorE")) == "mls::Error");
  CHECK(scope_key(symbol_scope("_ZGVZN3mls7testing4fooEvE1x")) == "mls::testing");
  CHECK(scope_key(symbol_scope("_ZThn8_N5Catch7Session3runEv")) == "Catch");
  CHECK(scope_key(symbol_scope("_ZNSt6vectorIdSaIdEE9push_backERKd")) == "std");
  CHECK(scope_key(symbol_scope("_ZSt4cout")) == "std");
  CHECK(scope_key(symbol_scope("_Z3foov")) == "foo");
  CHECK(scope_key(symbol_scope("_Znwm")) == "operator");
  CHECK(scope_key(symbol_scope("_Z107__device_stub__ZN3mls7kernels4cuda48_GLOBAL__N__fea1a085_15_kernels_cuda_cu_7988cd66"
                               "14softmax_kernelEPfPKfiPfPKfi")) == "mls::kernels");
  CHECK(scope_key(symbol_scope("write")).empty());
  CHECK(mentions_forbidden("_ZNSt6vectorIN3mls7testing11ObservationESaIS2_EE9push_backERKS2_", {}));
  CHECK(mentions_forbidden("_ZNSt6vectorIN3ref3RefESaIS1_EE9push_backERKS1_", {"ref"}));
  CHECK_FALSE(mentions_forbidden("_ZNSt6vectorIN3mls6tensor6TensorESaIS2_EE9push_backERKS2_", {"ref"}));
  CHECK_FALSE(mentions_forbidden("_ZN3foo13refcount_helpEv", {"ref"}));  // "ref" only as a whole scope
}

TEST_CASE("link audit: what a student object may define and use", "[grader][link_audit]") {
  // The lab's API and its own names in the lab's namespace; weak library copies; locals.
  CHECK(audit("_ZN3mls6tensor6matmulERKNS0_6TensorES3_", 'T').empty());
  CHECK(audit("_ZN3mls6tensor12my_new_helperEv", 'T').empty());
  CHECK(audit("_ZNSt6vectorIdSaIdEE17_M_realloc_insertIJRKdEEEvN9__gnu_cxx17__normal_iteratorIPdS1_EEDpOT_", 'W').empty());
  CHECK(audit("_ZNK3mls6tensor6Tensor5shapeEv", 'W').empty());
  CHECK(audit("_ZN12_GLOBAL__N_14tileEv", 't').empty());
  CHECK(audit("DW.ref.__gxx_personality_v0", 'V').empty());
  CHECK(audit("_ZN3mls6tensor3addEv", 'U').empty());
  CHECK(audit("memcpy", 'U').empty());
  // Refused, each naming the symbol and the rule.
  auto one = [](const std::vector<std::string>& v, const std::string& needle) {
    INFO((v.empty() ? std::string("(no violation)") : v[0]));
    return v.size() == 1 && v[0].find(needle) != std::string::npos &&
           v[0].rfind("lab1_tensor/src/matmul.cpp: `", 0) == 0;
  };
  CHECK(one(audit("write", 'T'), "defines the C symbol `write`"));
  CHECK(one(audit("malloc", 'W'), "defines the C symbol `malloc`"));
  CHECK(one(audit("_ZN3mls7testing9observingEv", 'T'), "a symbol of the tests or the grader's harness"));
  CHECK(one(audit("_ZN3mls7testing16observation_sinkEv", 'W'), "a symbol of the tests"));
  CHECK(one(audit("_ZZN3mls7testing16observation_sinkEvE4sink", 'U'), "uses a symbol of the tests"));
  CHECK(one(audit("_ZN5Catch11StringMakerIivE7convertEi", 'T'), "a symbol of the tests"));
  CHECK(one(audit("_ZN18mls_grader_harness7channelEv", 'U'), "uses a symbol of the tests"));
  CHECK(one(audit("_ZN3ref11same_valuesEv", 'W'), "a symbol of the tests"));
  CHECK(one(audit("_Z11test_helperv", 'U'), "uses a function or variable the tests define"));
  CHECK(one(audit("_ZN3mls6tensor6detail5inl_aEv", 'T'), "replaces a definition"));
  CHECK(one(audit("_ZN3mls3Rng7uniformEv", 'T'), "outside the lab's namespace"));
  CHECK(one(audit("_Znwm", 'T'), "outside the lab's namespace"));
  CHECK(one(audit("_ZNSt6vectorIN3mls7testing11ObservationESaIS2_EE9push_backERKS2_", 'W'), "a symbol of the tests"));
}
