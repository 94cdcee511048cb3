#!/bin/bash
# The hostile suite on lab 1 (issue 25; CTest `grader:e2e: lab 1 hostile submissions`, labels
# grader and slow): one batch, graded differentially. The control is the reference's student files
# with matmul.cpp the handout's stub (matmul computes nothing); each attack is the control plus
# one attack appended to matmul.cpp. Every attack must score no more than the control, and the
# refused ones must be refused by the link audit, naming the symbol.
# Usage: hostile_lab1.sh <mls-grader> <repo root> [jobs]
set -euo pipefail
grader=$1 root=$2 jobs=${3:-2}
work=$(mktemp -d "${TMPDIR:-/tmp}/mls-grader-hostile-lab1.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$grader" handout --root "$root" --lab 1 --out "$work/handout" >/dev/null
python3 - "$root" "$work" <<'PY'
import json, os, shutil, sys
root, work = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(root, "lab1_tensor/lab.json")))
stub = open(os.path.join(work, "handout/lab1_tensor/src/matmul.cpp")).read()
attacks = {
    "control": "",
    # cause 1: libc's write under an __asm__ label (FAIL -> PASS on the channel)
    "asm_write": r'''
#include <sys/syscall.h>
#include <unistd.h>
#include <string>
long forged_w(int fd, const void* buf, unsigned long n) __asm__("w" "rite");
long forged_w(int fd, const void* buf, unsigned long n) {
  std::string s(static_cast<const char*>(buf), n);
  for (std::size_t at = s.find(" FAIL "); at != std::string::npos; at = s.find(" FAIL ", at)) s.replace(at, 6, " PASS ");
  long done = ::syscall(SYS_write, fd, s.data(), s.size());
  return done < 0 ? done : static_cast<long>(n);
}
''',
    # causes 1 and 2: the tests' oracle helper (lab 1's ref::) replaced under its linker name
    "asm_oracle": r'''
bool forged_same() __asm__("_ZN3ref11same_valuesERKN3mls6tensor6TensorERKNS_3RefEPNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
bool forged_same() { return true; }
''',
    # cause 2: Catch2's printing of a checked value replaced
    "asm_stringmaker": r'''
#include <string>
std::string forged_convert(long) __asm__("_ZN5Catch11StringMakerIlvE7convertEl");
std::string forged_convert(long) { return "0"; }
''',
    # cause 3: a second, forged XML report of the test that ran, claiming success
    "xml_twice": r'''
#include <cstdio>
namespace {
struct Forge {
  ~Forge() { std::printf("<Catch><Group><TestCase name=\"x\"><OverallResult success=\"true\"/></TestCase></Group></Catch>\n"); }
} forge;
}  // namespace
''',
    # cause 5: 1 GiB without a line break on the result channel's fd, from a static constructor
    "flood": r'''
#include <unistd.h>
#include <vector>
namespace {
struct Flood {
  Flood() {
    std::vector<char> junk(1 << 20, 'x');
    for (int i = 0; i < 1024; ++i)
      if (::write(4, junk.data(), junk.size()) < 0) break;
  }
} flood;
}  // namespace
''',
}
# Attacks that are the matmul itself: the stub's MLS_TODO replaced by a call to the attack.
bodies = {
    # cause 2: the tests' expected value found in the process. A ref::Ref (two std::vectors:
    # shape, values) of the result's shape on the callers' stack frames is copied out as the
    # result. Finds `want` wherever a test computed it before calling matmul; in the graded twin
    # (lab.json "oracle_free") there is none to find.
    "stack_want": r'''
#include <pthread.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>
namespace mls::inline tensor {
Tensor forged_matmul(const Tensor& a, const Tensor& b) {
  if (a.ndim() != 2 || b.ndim() != 2 || !(a.dtype() == DType::Float32 || a.dtype() == DType::Float64) || a.dtype() != b.dtype())
    MLS_TODO("lab1: matmul");
  const std::int64_t M = a.shape()[0], N = b.shape()[1];
  pthread_attr_t attr;
  void* stack = nullptr;
  std::size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) MLS_TODO("lab1: matmul");
  pthread_attr_getstack(&attr, &stack, &size);
  pthread_attr_destroy(&attr);
  const auto top = reinterpret_cast<std::uintptr_t>(stack) + size;
  void* heap = std::malloc(16);
  const auto h = reinterpret_cast<std::uintptr_t>(heap);
  std::free(heap);
  auto near_heap = [&](std::uintptr_t p) { return p != 0 && p % 8 == 0 && p + (1ull << 32) > h && p < h + (1ull << 32); };
  for (auto at = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)) & ~std::uintptr_t{7}; at + 48 <= top; at += 8) {
    std::uintptr_t w[6];
    std::memcpy(w, reinterpret_cast<const void*>(at), sizeof w);
    if (!near_heap(w[0]) || !near_heap(w[3]) || w[1] - w[0] != 16 || w[2] < w[1]) continue;
    if (w[4] - w[3] != static_cast<std::uintptr_t>(M * N) * 8 || w[5] < w[4]) continue;
    const auto* shape = reinterpret_cast<const std::int64_t*>(w[0]);
    if (shape[0] != M || shape[1] != N) continue;
    const auto* v = reinterpret_cast<const double*>(w[3]);
    Tensor out = Tensor::zeros({M, N}, a.dtype());
    for (std::int64_t i = 0; i < M * N; ++i) {
      if (a.dtype() == DType::Float32) static_cast<float*>(out.data_ptr())[i] = static_cast<float>(v[i]);
      else static_cast<double*>(out.data_ptr())[i] = v[i];
    }
    return out;
  }
  MLS_TODO("lab1: matmul");
}
}  // namespace mls::tensor
''',
}
for name, body in bodies.items():
    attacks[name] = body
# Attacks that patch another student file (the control's own, the reference's): (file, old, new).
binary_end = "  scalar::with_binary(op, [&](auto c) { run_binary<decltype(c)::value>(out, x, y); });\n  return out;\n}"
patches = {
    # cause 4: large float32 results computed only where a fixed sample would look (both ends and
    # every 4099th value): the rest left at 0. The grader compares the middle at secret positions.
    "lazy_middle": ("lab1_tensor/src/elementwise.cpp", binary_end,
        "  scalar::with_binary(op, [&](auto c) { run_binary<decltype(c)::value>(out, x, y); });\n"
        "  if (out.dtype() == DType::Float32 && out.numel() > 200000 && out.is_contiguous()) {\n"
        "    float* p = static_cast<float*>(out.data_ptr());\n"
        "    for (std::int64_t i = 40000; i < out.numel() - 40000; ++i)\n"
        "      if (i % 4099 != 0) p[i] = 0.0f;\n"
        "  }\n  return out;\n}"),
    # cause 4: the same, wrong only in the last value of a large result (a loop's remainder)
    "wrong_tail": ("lab1_tensor/src/elementwise.cpp", binary_end,
        "  scalar::with_binary(op, [&](auto c) { run_binary<decltype(c)::value>(out, x, y); });\n"
        "  if (out.dtype() == DType::Float32 && out.numel() > 200000 && out.is_contiguous())\n"
        "    static_cast<float*>(out.data_ptr())[out.numel() - 1] += 1.0f;\n"
        "  return out;\n}"),
}
for name in patches:
    attacks[name] = ""
for name, extra in attacks.items():
    sub = os.path.join(work, "batch", name)
    for rel in m["student_files"]:
        dst = os.path.join(sub, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if rel.endswith("matmul.cpp"):
            text = stub + extra
            if name in bodies:
                todo = '  MLS_TODO("lab1: matmul");\n}'
                assert todo in stub, "the stub's matmul ends otherwise"
                head = "Tensor matmul(const Tensor& a_in, const Tensor& b_in) {"
                assert head in stub, "the stub's matmul starts otherwise"
                text = (stub.replace(head, "Tensor forged_matmul(const Tensor&, const Tensor&);\n" + head)
                        .replace(todo, "  return forged_matmul(a_in, b_in);\n}") + extra)
            open(dst, "w").write(text)
        elif name in patches and patches[name][0] == rel:
            _, old, new = patches[name]
            text = open(os.path.join(root, rel)).read()
            assert old in text, f"{name}: {rel} changed: the patch does not apply"
            open(dst, "w").write(text.replace(old, new))
        else:
            shutil.copyfile(os.path.join(root, rel), dst)
# cause 6: the leaderboard. A submission that prints its own benchmark reports (Google
# Benchmark JSON and `ratio` lines claiming 10^6 x memcpy) at exit, graded with --bench next to
# the same files without the print: figures are the grader's timing of validated check runs.
forge = r'''
#include <cstdio>
namespace {
struct ForgedReport {
  ~ForgedReport() {
    for (FILE* f : {stdout, stderr}) {
      std::fprintf(f, "ratio add_vs_memcpy 1000000\nratio compact_vs_memcpy 1000000\n");
      std::fprintf(f, "{\"benchmarks\": [{\"name\": \"BM_Add/1/\", \"real_time\": 1e-9}, {\"name\": \"BM_Memcpy\", \"real_time\": 1}]}\n");
    }
  }
} forged_report;
}  // namespace
'''
for name in ("bench_control", "bench_forged"):
    for rel in m["student_files"]:
        dst = os.path.join(work, "bench", name, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        text = open(os.path.join(root, rel)).read()
        if name == "bench_forged" and rel.endswith("matmul.cpp"):
            text += forge
        open(dst, "w").write(text)
PY
"$grader" grade --root "$root" --lab 1 -j "$jobs" --batch "$work/batch" --csv "$work/scores.csv" \
  --results "$work/results" >"$work/out.txt" 2>"$work/err.txt" || true
"$grader" grade --root "$root" --lab 1 -j "$jobs" --bench --batch "$work/bench" --csv "$work/bench.csv" \
  --results "$work/bench-results" >"$work/bench-out.txt" 2>"$work/bench-err.txt" || true
cat "$work/scores.csv"
grep "reference ready\|graded in" "$work/err.txt" || true
python3 - "$work" <<'PY'
import csv, json, os, sys
work = sys.argv[1]
rows = {r["submission"]: r for r in csv.DictReader(open(os.path.join(work, "scores.csv")))}
bad = []
control = rows.get("control")
if not control or float(control["score"]) <= 0:
    bad.append(f"control: {control and control['score']} (expected above 0: every lab 1 function but matmul)")
refused = {"asm_write": "`write`", "asm_oracle": "ref::same_values", "asm_stringmaker": "Catch::StringMaker"}
detected = ("lazy_middle", "wrong_tail", "stack_want")  # must score below or at the control, and fail a test
for name, r in rows.items():
    if name == "control":
        continue
    print(f"[hostile lab 1] {name:16s} {float(r['score']):6.2f}  (control {float(control['score']):6.2f})")
    if float(r["score"]) > float(control["score"]):
        bad.append(f"{name}: {r['score']} > control {control['score']}")
    if name in refused:
        out = json.load(open(os.path.join(work, "results", name, "results.json"))).get("output", "")
        if "error: link audit:" not in out or refused[name] not in out:
            bad.append(f"{name}: not refused by the link audit naming {refused[name]}: {out[:600]}")
    if name == "flood" and int(r["OUTPUT_LIMIT"]) == 0:
        bad.append("flood: no OUTPUT_LIMIT")
    if name in ("lazy_middle", "wrong_tail") and float(r["score"]) >= float(control["score"]):
        bad.append(f"{name}: {r['score']} not below the control {control['score']}: its wrong values went unseen")
# cause 6: the forged reports are not the figures
boards = {}
for name in ("bench_control", "bench_forged"):
    try:
        j = json.load(open(os.path.join(work, "bench-results", name, "results.json")))
    except OSError:
        bad.append(f"{name}: no results.json")
        continue
    boards[name] = {e["name"]: e for e in j.get("leaderboard", [])}
    print(f"[hostile lab 1] {name:16s} leaderboard " + ", ".join(f"{k} {v['value']:.3g}" for k, v in boards[name].items()))
if "bench_control" in boards and "bench_forged" in boards:
    if not boards["bench_control"]:
        bad.append("bench_control: no leaderboard figure (the honest submission should have some)")
    for k, e in boards["bench_forged"].items():
        ref = boards["bench_control"].get(k)
        if e["value"] > 1000 or (ref and e["value"] > 3 * ref["value"]):
            bad.append(f"bench_forged: {k} = {e['value']} (control {ref and ref['value']}): a printed report was believed")
        if "grader" not in e.get("how", ""):
            bad.append(f"bench_forged: {k}: the figure does not say the grader measured it: {e.get('how')}")
if bad:
    print("FAIL lab 1 hostile suite:")
    for b in bad:
        print("  " + b)
    sys.exit(1)
print("lab 1 hostile suite: every attack scored no more than its control")
PY
