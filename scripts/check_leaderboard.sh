#!/usr/bin/env bash
# Renders a leaderboard from sample results (grader/tests/data/*.json) and checks in headless
# Chromium that the page shows the table: one row per submission, ranked, sortable. Writes a
# screenshot. Skips (exit 0, saying so) where Chromium is not installed (apt-get install chromium),
# fails there when MLS_REQUIRE_CHROMIUM=1 (CI: .ci/run installs it with scripts/setup.sh --bench).
#   scripts/check_leaderboard.sh [BUILD_DIR]      (default build/release)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build/release}"
browser="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$browser" ]; then
  if [ "${MLS_REQUIRE_CHROMIUM:-0}" = 1 ]; then
    echo "check_leaderboard: FAILED: chromium is not installed and MLS_REQUIRE_CHROMIUM=1 (scripts/setup.sh --bench installs it)"
    exit 1
  fi
  echo "check_leaderboard: skipped: chromium is not installed (apt-get install chromium, or scripts/setup.sh --bench)"
  exit 0
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$build/bin/mls-grader" leaderboard --in "$root"/grader/tests/data/*.json --html "$out/board.html" \
  --md "$out/board.md" --title "Leaderboard check"
flags=(--headless --no-sandbox --disable-gpu --user-data-dir="$out/profile")
"$browser" "${flags[@]}" --dump-dom "file://$out/board.html" > "$out/dom.html" 2>/dev/null
"$browser" "${flags[@]}" --window-size=1400,700 --screenshot="$out/board.png" "file://$out/board.html" >/dev/null 2>&1
rows=$(grep -o '<tr' "$out/dom.html" | wc -l)
n=$(ls "$root"/grader/tests/data/*.json | wc -l)
size=$(stat -c %s "$out/board.png" 2>/dev/null || echo 0)
if [ "$rows" -lt $((n + 1)) ] || ! grep -q 'carol' "$out/dom.html" || [ "$size" -lt 5000 ]; then
  echo "check_leaderboard: FAILED: $rows table rows for $n submissions, screenshot $size bytes"
  exit 1
fi
cp "$out/board.png" "$build/leaderboard-check.png"
echo "check_leaderboard: ok: $((rows - 1)) ranked rows rendered; screenshot $build/leaderboard-check.png"
