#!/usr/bin/env bash
# Fuzzes the .npy parser (common/fuzz/fuzz_npy.cpp) with libFuzzer, ASan and UBSan.
#   scripts/fuzz.sh SECONDS     build the `fuzz` preset (clang) and fuzz for SECONDS (default 60)
# The seed corpus (common/fuzz/corpus) is copied to a temporary directory, so the tree is never
# changed; inputs that crash are kept in build/fuzz/fuzz-artifacts/. Without clang's libFuzzer
# runtime it tries `scripts/setup.sh --fuzz` (as root or with passwordless sudo), else it skips.
set -euo pipefail

secs="${1:-60}"
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh SECONDS (a whole number >= 1, got '$secs')" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# True when clang and clang++ exist and can link a libFuzzer target with the sanitizers.
have_libfuzzer() {
  command -v clang >/dev/null 2>&1 && command -v clang++ >/dev/null 2>&1 || return 1
  local dir ok=1
  dir="$(mktemp -d)"
  printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$dir/probe.cpp"
  if clang++ -fsanitize=fuzzer,address,undefined "$dir/probe.cpp" -o "$dir/probe" >/dev/null 2>&1; then
    ok=0
  fi
  rm -rf "$dir"
  return "$ok"
}

if ! have_libfuzzer; then
  if [ "$(id -u)" -eq 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; then
    echo "fuzz: clang/libFuzzer missing, trying scripts/setup.sh --fuzz"
    "$root/scripts/setup.sh" --fuzz || true
  fi
  if ! have_libfuzzer; then
    echo "fuzz: skipped: clang/libFuzzer not installed (scripts/setup.sh --fuzz)"
    exit 0
  fi
fi

echo "fuzz: building the fuzz preset (target mls_fuzz_npy)"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target mls_fuzz_npy -j "$(nproc 2>/dev/null || echo 2)"

work="$(mktemp -d "${TMPDIR:-/tmp}/mls_fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$root/build/fuzz/fuzz-artifacts"
cp "$root"/common/fuzz/corpus/*.npy "$work/corpus/"

echo "fuzz: fuzzing parse_npy for ${secs}s (corpus copied to $work/corpus)"
status=0
"$root/build/fuzz/common/mls_fuzz_npy" "$work/corpus" \
  -max_total_time="$secs" -rss_limit_mb=2048 -max_len=4096 -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$root/build/fuzz/fuzz-artifacts/" || status=$?
if [ "$status" -ne 0 ]; then
  echo "fuzz: FAILED (exit status $status); the input is in build/fuzz/fuzz-artifacts/" \
       "(replay: build/fuzz/common/mls_fuzz_npy <file>)" >&2
  exit "$status"
fi
echo "fuzz: no findings in ${secs}s"
