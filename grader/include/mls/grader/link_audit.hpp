#pragma once
/// The link audit: before a submission's objects are linked with the reference's tests, harness
/// and libraries, every symbol they define and reference is checked (from the compiled objects,
/// `nm`, so `__asm__` labels, `weak` attributes and inline assembly are seen as the linker sees
/// them). A student object may define only
///   - what the reference's student objects define (the lab's API and what its code needs), or
///   - new names of its own in the lab's namespaces (those the reference's student objects define
///     functions or data in), that nothing else in the link defines, or
///   - weak (inline and template) copies of library code (std, common, ...),
/// and may reference nothing of the tests, the harness or the grader. Everything else (a C name
/// such as `write` or `malloc`, a symbol of Catch2, of `mls::testing`, of the tests' helpers, a
/// strong copy of an inline function some other object defines) rejects the submission at build
/// time, naming the symbol and the file.
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace mls::grader {

/// One symbol of an object file as `nm -P` prints it (`type` is nm's letter).
struct NmSymbol {
  std::string name;
  char type = '?';
};

/// `nm -P -A` output, by file: "file: name type ..." or "archive[member]: name type ...". The key
/// is the file (an archive's members are keyed "archive[member]").
std::map<std::string, std::vector<NmSymbol>> parse_nm(std::string_view text);

/// A global definition (strong or weak), an undefined reference, or a local symbol.
enum class SymbolRole { Strong, Weak, Undefined, Local };
SymbolRole symbol_role(char nm_type);

/// The first two names of a mangled C++ symbol's scope, e.g. {"mls", "tensor"} for
/// `_ZN3mls6tensor3addE...`, {"std", "vector"} for `_ZNSt6vectorI...`, {"foo"} for `_Z3foov`;
/// special names (vtables, typeinfo, guard variables, thunks, local statics) are those of what
/// they belong to; {"operator"} for a global operator (new, delete). Empty for a C name (not
/// mangled), {"?"} for a mangling it cannot read (never in the lab's namespace).
std::vector<std::string> symbol_scope(std::string_view mangled);

/// The scope key the rules use: "mls::<second>" under mls, else the first name ("" for C).
std::string scope_key(const std::vector<std::string>& scope);

/// Readable name of a symbol (demangled when it is C++; cut at 200 characters, or whole).
std::string demangled(const std::string& mangled);
std::string demangled_full(const std::string& mangled);

/// Whether a C++ symbol's demangled name names a scope of the tests, the harness or the grader
/// anywhere (a template argument included), e.g. std::vector<mls::testing::Observation>::push_back.
bool mentions_forbidden(const std::string& mangled, const std::set<std::string>& test_keys);

/// What a submission's objects are audited against, from the reference build's objects.
struct LinkAuditContext {
  std::set<std::string> allowed;       ///< global definitions of the reference's student objects
  std::set<std::string> lab_keys;      ///< scope keys of their strong definitions (the lab's namespaces)
  std::set<std::string> others;        ///< global definitions of every other input of the link
  std::set<std::string> test_defined;  ///< strong definitions of the tests and the harness
  std::set<std::string> test_keys;     ///< scope keys only the tests' objects define in (e.g. a helper namespace)
};

/// Scope keys never allowed in a student object, defined or referenced: the tests' observation
/// layer, the grader's protocol and harness, Catch2.
bool is_forbidden_key(const std::string& key);

/// The rules above applied to one student object's symbols: one line per violation, naming the
/// symbol (demangled, and as the linker sees it) and what is wrong. Empty: the object may be linked.
std::vector<std::string> audit_student_object(const std::string& file, const std::vector<NmSymbol>& symbols,
                                              const LinkAuditContext& ctx);

}  // namespace mls::grader
