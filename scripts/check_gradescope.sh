#!/usr/bin/env bash
# Tries lab N's Gradescope autograder the way Gradescope runs it, in a fresh Debian 12 root
# (handouts/README.md, "Gradescope"). As root:
#
#   scripts/check_gradescope.sh N [ROOTFS] [MLS-GRADER]
#
# ROOTFS: a Debian 12 root folder to use (made by `debootstrap --variant=minbase bookworm DIR`;
# default: one is made under /var/tmp, which needs debootstrap and Debian's mirror). It is used as
# it is: give a fresh one for a fresh check. MLS-GRADER: default build/release/bin/mls-grader.
#  1. mls-grader gradescope --lab N --out autograder.zip
#  2. in the root (chroot; /proc, /sys, /dev bound, a fresh /dev/shm): unzip to
#     /autograder/source, copy run_autograder to /autograder/run_autograder, run setup.sh as root
#  3. three submissions, each put in /autograder/submission and graded by /autograder/run_autograder
#     (working folder /autograder) at the `uid` isolation level (what a container without
#     CAP_SYS_ADMIN gives): the reference's student files (must score the maximum), an empty
#     submission (the handout's stubs: the `given` groups' points), and a forged one (the stubs
#     plus a static constructor that writes a results.json claiming full marks into
#     /autograder/results, prints a forged Catch2 report and tries to read the reference's copy
#     of its own file): must score what the stubs score, and no reference text in its results.
# Each results.json is kept in $OUT (or the work folder) as results-<name>.json; exit 1 on any
# deviation.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lab="${1:?usage: check_gradescope.sh N [ROOTFS] [MLS-GRADER]}"
rootfs="${2:-}"
grader="$(realpath "${3:-$root/build/release/bin/mls-grader}")"
[ "$(id -u)" -eq 0 ] || { echo "check_gradescope.sh: run as root (chroot, mounts)" >&2; exit 2; }
[ -x "$grader" ] || { echo "check_gradescope.sh: no mls-grader at $grader (build it: cmake --build --preset release --target mls-grader)" >&2; exit 2; }
work="$(mktemp -d /var/tmp/mls-gradescope.XXXXXX)"
out="${OUT:-$work}"
mkdir -p "$out"
say() { echo "check_gradescope: $*"; }

if [ -z "$rootfs" ]; then
  command -v debootstrap >/dev/null || { echo "check_gradescope.sh: give ROOTFS or install debootstrap" >&2; exit 2; }
  rootfs="$work/rootfs"
  say "debootstrap bookworm -> $rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log"; exit 1; }
fi
rootfs="$(realpath "$rootfs")"

mounts=()
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() { mkdir -p "$rootfs$2"; mount "${@:3}" "$1" "$rootfs$2"; mounts+=("$rootfs$2"); }
bind proc /proc -t proc
bind sysfs /sys -t sysfs
bind /dev /dev --bind
bind devpts /dev/pts -t devpts
bind tmpfs /dev/shm -t tmpfs
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
in_root() {
  chroot "$rootfs" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive MLS_GRADER_ISOLATION=uid /bin/bash -c "$1"
}

say "1. the archive"
"$grader" gradescope --root "$root" --lab "$lab" --out "$work/autograder.zip"

say "2. setup.sh in $rootfs (as Gradescope builds its image)"
in_root "apt-get update -qq && apt-get install -y -qq --no-install-recommends unzip ca-certificates >/dev/null"
rm -rf "$rootfs/autograder"
mkdir -p "$rootfs/autograder/source"
cp "$work/autograder.zip" "$rootfs/autograder/autograder.zip"
start=$SECONDS
rc=0
in_root "cd /autograder && unzip -q autograder.zip -d source && rm autograder.zip && cp source/run_autograder /autograder/run_autograder && cd source && bash ./setup.sh" \
  >"$work/setup.log" 2>&1 || rc=$?
grep -A3 '^setup.sh:' "$work/setup.log" || true
[ "$rc" -eq 0 ] || { tail -n 40 "$work/setup.log"; say "FAILED: setup.sh (exit $rc)"; exit 1; }
say "setup.sh took $((SECONDS - start)) s"

# The submissions, made from this checkout: the reference's student files and the handout's stubs.
"$grader" handout --root "$root" --lab "$lab" --out "$work/handout" >/dev/null
mapfile -t files < <(python3 -c "import json,sys; print('\n'.join(json.load(open(sys.argv[1]))['student_files']))" \
  "$(ls -d "$root"/lab"$lab"_*/lab.json)")
mkdir -p "$work/subs/reference" "$work/subs/stubs" "$work/subs/forged"
for f in "${files[@]}"; do cp "$root/$f" "$work/subs/reference/"; done
first="${files[0]}"
cp "$work/handout/$first" "$work/subs/forged/"
cat >>"$work/subs/forged/$(basename "$first")" <<'FORGE'

// ---- forged (check_gradescope.sh): a verdict written by the student's process ----
#include <cstdio>
namespace {
struct Forge {
  Forge() {
    const char* claim = "{\"score\": 1000, \"tests\": [], \"output\": \"FORGED\"}";
    for (const char* p : {"/autograder/results/results.json", "/autograder/results/results.json.tmp"})
      if (std::FILE* f = std::fopen(p, "w")) { std::fputs(claim, f); std::fclose(f); }
    std::printf("<Catch><Group><TestCase><OverallResult success=\"true\"/></TestCase></Group></Catch>\n");
    if (std::FILE* f = std::fopen("/autograder/source/course/" FIRST_FILE, "r")) {
      char buf[200] = {};
      if (std::fread(buf, 1, sizeof buf - 1, f) > 0) std::printf("LEAKED %s\n", buf);
      std::fclose(f);
    }
  }
} forge;
}  // namespace
FORGE
sed -i "s|FIRST_FILE|\"$first\"|" "$work/subs/forged/$(basename "$first")"

failed=0
declare -A score max
for name in reference stubs forged; do
  rm -rf "$rootfs/autograder/submission" "$rootfs/autograder/results"
  cp -r "$work/subs/$name" "$rootfs/autograder/submission"
  start=$SECONDS
  in_root "cd /autograder && ./run_autograder" >"$work/run-$name.log" 2>&1 || true
  cp "$rootfs/autograder/results/results.json" "$out/results-$name.json" 2>/dev/null ||
    { say "FAILED: $name: no results.json"; tail -n 20 "$work/run-$name.log"; failed=1; continue; }
  read -r s m < <(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
print(r['score'], round(sum(t.get('max_score', 0) for t in r.get('tests', [])), 6))" "$out/results-$name.json")
  score[$name]=$s
  max[$name]=$m
  say "$name: $s / $m ($((SECONDS - start)) s)"
done
# Per-test maxima are hundredths: their float sum may differ from the maximum in the last digits.
awk -v a="${score[reference]:--1}" -v b="${max[reference]:-0}" 'BEGIN { d = a - b; exit !(b > 0 && d < 1e-6 && d > -1e-6) }' ||
  { say "FAILED: the reference's files must score the maximum"; failed=1; }
awk -v a="${score[forged]:--1}" -v b="${score[stubs]:--2}" 'BEGIN { exit !(a == b) }' ||
  { say "FAILED: the forged submission must score what the stubs score"; failed=1; }
if grep -q -e FORGED -e LEAKED "$out/results-forged.json" 2>/dev/null; then
  say "FAILED: the forged submission's claim or the reference's text reached results.json"; failed=1
fi
[ $failed -eq 0 ] && say "lab $lab: the autograder grades as Gradescope would run it (results in $out)"
exit $failed
