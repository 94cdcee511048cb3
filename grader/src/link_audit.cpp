#include "mls/grader/link_audit.hpp"

#include <cxxabi.h>

#include <cctype>
#include <cstdlib>
#include <memory>

#include "mls/grader/util.hpp"

namespace mls::grader {

std::map<std::string, std::vector<NmSymbol>> parse_nm(std::string_view text) {
  std::map<std::string, std::vector<NmSymbol>> out;
  for (const auto& line : split(text, '\n')) {
    // "file: name type [value size]"; the file may hold ": " only before the symbol.
    std::size_t colon = line.rfind(": ");
    if (colon == std::string::npos) continue;
    std::string file = line.substr(0, colon);
    std::string_view rest = std::string_view(line).substr(colon + 2);
    std::size_t sp = rest.find(' ');
    if (sp == std::string_view::npos || sp + 1 >= rest.size()) continue;
    NmSymbol s;
    s.name = std::string(rest.substr(0, sp));
    s.type = rest[sp + 1];
    out[file].push_back(std::move(s));
  }
  return out;
}

SymbolRole symbol_role(char t) {
  switch (t) {
    case 'U': case 'w': case 'v': return SymbolRole::Undefined;
    case 'W': case 'V': case 'u': return SymbolRole::Weak;
    case 'A': case 'B': case 'C': case 'D': case 'G': case 'R': case 'S': case 'T': case 'i': case 'I':
      return SymbolRole::Strong;
    default: return SymbolRole::Local;  // lowercase: local; N, n, p, ?: debugging and the like
  }
}

namespace {

/// Reads "<len><id>" at `i`; false when there is none.
bool source_name(std::string_view m, std::size_t& i, std::string& id) {
  if (i >= m.size() || !std::isdigit(static_cast<unsigned char>(m[i]))) return false;
  std::size_t n = 0;
  while (i < m.size() && std::isdigit(static_cast<unsigned char>(m[i]))) n = n * 10 + static_cast<std::size_t>(m[i++] - '0');
  if (n == 0 || i + n > m.size()) return false;
  id = std::string(m.substr(i, n));
  i += n;
  return true;
}

/// std:: abbreviations: St (std::), Sa, Sb, Ss, Si, So, Sd.
bool std_abbreviation(std::string_view m, std::size_t i) {
  return i + 1 < m.size() && m[i] == 'S' && std::string_view("tabsiod").find(m[i + 1]) != std::string_view::npos;
}

/// A call offset of a thunk: "h<number>_" or "v<number>_<number>_" at `i`.
bool call_offset(std::string_view m, std::size_t& i) {
  if (i >= m.size()) return false;
  int parts = m[i] == 'h' ? 1 : m[i] == 'v' ? 2 : 0;
  if (!parts) return false;
  ++i;
  for (int p = 0; p < parts; ++p) {
    if (i < m.size() && m[i] == 'n') ++i;
    while (i < m.size() && std::isdigit(static_cast<unsigned char>(m[i]))) ++i;
    if (i >= m.size() || m[i] != '_') return false;
    ++i;
  }
  return true;
}

}  // namespace

std::vector<std::string> symbol_scope(std::string_view m) {
  if (m.substr(0, 2) != "_Z") return {};
  std::size_t i = 2;
  const std::vector<std::string> unknown = {"?"};
  // Special names: what they belong to decides.
  for (int guard = 0; guard < 8 && i + 1 < m.size(); ++guard) {
    if (m[i] == 'T' && std::string_view("VISTWH").find(m[i + 1]) != std::string_view::npos) {
      i += 2;
    } else if (m[i] == 'T' && (m[i + 1] == 'h' || m[i + 1] == 'v')) {
      ++i;
      if (!call_offset(m, i)) return unknown;
    } else if (m[i] == 'T' && m[i + 1] == 'c') {
      return unknown;  // covariant thunks: rare, never in a student's API
    } else if (m[i] == 'G' && (m[i + 1] == 'V' || m[i + 1] == 'R')) {
      i += 2;
    } else if (m[i] == 'Z') {  // a local entity: the enclosing function's scope
      ++i;
    } else if (m[i] == 'L') {  // internal linkage
      ++i;
    } else {
      break;
    }
  }
  std::vector<std::string> out;
  std::string id;
  if (i < m.size() && m[i] == 'N') {
    ++i;
    while (i < m.size() && std::string_view("rVKRO").find(m[i]) != std::string_view::npos) ++i;
    if (std_abbreviation(m, i)) {
      out.push_back("std");
      i += 2;
    }
    while (out.size() < 2 && source_name(m, i, id)) {
      out.push_back(id);
      while (i + 1 < m.size() && m[i] == 'B' && source_name(m, ++i, id)) {
      }  // ABI tags
    }
    return out.empty() ? unknown : out;
  }
  if (std_abbreviation(m, i)) {
    out.push_back("std");
    i += 2;
    if (source_name(m, i, id)) out.push_back(id);
    return out;
  }
  if (source_name(m, i, id)) {
    // nvcc's host stub of a kernel, `__device_stub__<the kernel's mangled name without its
    // leading underscore>`: the kernel's scope (its file's anonymous-namespace hash differs
    // between the reference's file and the student's, so only the scope can be checked).
    constexpr std::string_view stub = "__device_stub__";
    if (id.rfind(stub, 0) == 0 && id.size() > stub.size() + 1 && id[stub.size()] == 'Z')
      return symbol_scope("_" + id.substr(stub.size()));
    return {id};
  }
  // An operator at global scope (operator new, delete, ...): two lowercase letters.
  if (i + 1 < m.size() && std::islower(static_cast<unsigned char>(m[i])) && std::islower(static_cast<unsigned char>(m[i + 1])))
    return {"operator"};
  return unknown;
}

std::string scope_key(const std::vector<std::string>& scope) {
  if (scope.empty()) return "";
  if (scope[0] == "mls" && scope.size() > 1) return "mls::" + scope[1];
  return scope[0];
}

std::string demangled_full(const std::string& mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : mangled;
}

std::string demangled(const std::string& mangled) {
  std::string s = demangled_full(mangled);
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

bool is_forbidden_key(const std::string& key) {
  static const std::set<std::string> keys = {"mls::testing", "mls::grader_protocol", "Catch", "mls_grader_harness",
                                             "MlsGraderHarnessListener", "mls::grader"};
  return keys.count(key) > 0;
}

bool mentions_forbidden(const std::string& mangled, const std::set<std::string>& test_keys) {
  if (mangled.rfind("_Z", 0) != 0) return false;
  const std::string d = demangled_full(mangled);
  auto has_scope = [&](const std::string& scope) {
    for (std::size_t at = d.find(scope + "::"); at != std::string::npos; at = d.find(scope + "::", at + 1))
      if (at == 0 || !(std::isalnum(static_cast<unsigned char>(d[at - 1])) || d[at - 1] == '_' || d[at - 1] == ':')) return true;
    return false;
  };
  for (const char* k : {"mls::testing", "mls::grader_protocol", "mls::grader", "Catch", "mls_grader_harness"})
    if (has_scope(k)) return true;
  for (const auto& k : test_keys)
    if (has_scope(k)) return true;
  return false;
}

std::vector<std::string> audit_student_object(const std::string& file, const std::vector<NmSymbol>& symbols,
                                              const LinkAuditContext& ctx) {
  std::vector<std::string> why;
  std::set<std::string> said;
  auto bad = [&](const NmSymbol& s, const std::string& what) {
    if (!said.insert(s.name).second) return;
    std::string shown = demangled(s.name);
    why.push_back(file + ": `" + shown + "`" + (shown != s.name ? " (" + s.name + ")" : "") + ": " + what);
  };
  for (const NmSymbol& s : symbols) {
    const SymbolRole role = symbol_role(s.type);
    if (role == SymbolRole::Local) continue;
    const std::string key = scope_key(symbol_scope(s.name));
    // A template of any scope instantiated on a type of the tests or the harness reaches into
    // them as well (e.g. std::vector<mls::testing::Observation>::push_back).
    const bool forbidden = is_forbidden_key(key) || ctx.test_keys.count(key) > 0 || mentions_forbidden(s.name, ctx.test_keys);
    if (role == SymbolRole::Undefined) {
      if (forbidden)
        bad(s, "uses a symbol of the tests or the grader's harness (a student file may use the lab's and the toolkit's code only)");
      else if (ctx.test_defined.count(s.name) && !ctx.allowed.count(s.name))
        bad(s, "uses a function or variable the tests define (a student file may use the lab's and the toolkit's code only)");
      continue;
    }
    if (ctx.allowed.count(s.name)) continue;  // the reference's student files define it too
    if (forbidden) {
      bad(s, "defines a symbol of the tests or the grader's harness (it would replace or reach into theirs)");
    } else if (key.empty() && !(role == SymbolRole::Weak && s.name == "DW.ref.__gxx_personality_v0")) {
      bad(s, "defines the C symbol `" + s.name + "` (it would replace the C library's or the harness's; a student file "
             "defines only the lab's functions and names of its own in the lab's namespace or an unnamed namespace)");
    } else if (role == SymbolRole::Strong) {
      if (!ctx.lab_keys.count(key))
        bad(s, "defines a name outside the lab's namespace" +
                   std::string(ctx.lab_keys.empty() ? "" : " (" + *ctx.lab_keys.begin() + ")") +
                   ": put helpers in the lab's namespace or an unnamed namespace");
      else if (ctx.others.count(s.name))
        bad(s, "replaces a definition that another part of the program (the tests, the toolkit or the lab's given code) "
               "already has: a student file may not redefine it");
    }
    // A weak definition (an inline function or template instance) elsewhere is a copy of library
    // code: the linker keeps the first copy, the tests' and the libraries' objects come first.
  }
  return why;
}

}  // namespace mls::grader
