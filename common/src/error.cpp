#include "mls/common/error.hpp"

namespace mls::detail {

void throw_not_implemented(std::string_view what) {
  throw NotImplemented("not implemented: " + std::string(what));
}

}  // namespace mls::detail
