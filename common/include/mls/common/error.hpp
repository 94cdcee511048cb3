#pragma once
/// The one error type of mlsys-labs, its check macro and the marker for student TODOs.
///
/// Every misuse of a public function throws `mls::Error` with a message that names the
/// operation, the values involved and what was expected, e.g.
///   `add: cannot broadcast shapes [2, 3] and [4]`.
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace mls {

/// Base of every error the toolkit throws on bad input.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thrown by `MLS_TODO(...)`: a student function that has not been written yet. Deliberately
/// not an `mls::Error`, so that a test expecting a bad-input error does not pass on a stub.
class NotImplemented : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
/// Concatenates any streamable values into one string.
template <class... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
[[noreturn]] void throw_not_implemented(std::string_view what);
}  // namespace detail

/// Throws `mls::Error` whose message is the concatenation of `args`.
template <class... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(detail::cat(std::forward<Args>(args)...));
}

}  // namespace mls

/// `MLS_CHECK(cond, "op: message ", value, ...)`: throws `mls::Error` when `cond` is false.
#define MLS_CHECK(cond, ...)                 \
  do {                                       \
    if (!(cond)) [[unlikely]] {              \
      ::mls::fail(__VA_ARGS__);              \
    }                                        \
  } while (0)

/// Marks code a student must write. Throws `mls::NotImplemented("not implemented: <what>")`.
#define MLS_TODO(what) ::mls::detail::throw_not_implemented(what)
