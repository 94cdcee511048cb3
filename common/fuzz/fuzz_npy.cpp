// libFuzzer target for the .npy parser: scripts/fuzz.sh SECONDS builds and runs it.
//
// Every input must either parse or throw mls::Error (never crash, hang, over-allocate or read out
// of bounds: ASan and UBSan watch), and whatever parses must survive serialise + parse unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "mls/common/error.hpp"
#include "mls/common/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  mls::NpyArray a;
  try {
    a = mls::parse_npy(bytes);
  } catch (const mls::Error&) {
    return 0;  // bad input, refused cleanly
  }
  const std::vector<std::byte> again = mls::serialize_npy(a);
  mls::NpyArray b;
  try {
    b = mls::parse_npy(again);
  } catch (const mls::Error& e) {
    // The canonical header can be longer than a compact input's (", " between dimensions): only
    // a header over the reader's limit is an acceptable reason to refuse our own output.
    if (again.size() - a.data.size() > mls::kMaxNpyHeader) return 0;
    std::fprintf(stderr, "fuzz_npy: serialize_npy output does not parse: %s\n", e.what());
    std::abort();
  }
  if (b.dtype != a.dtype || b.shape != a.shape || b.fortran_order != a.fortran_order ||
      b.data != a.data) {
    std::fprintf(stderr, "fuzz_npy: round trip changed the array\n");
    std::abort();
  }
  return 0;
}
