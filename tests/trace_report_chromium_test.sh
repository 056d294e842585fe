#!/usr/bin/env bash
# Why this file exists: the HTML report is for people's browsers, so a real browser checks
# it: headless Chromium loads the report of the memory lesson's three traces, dumps the
# DOM after the page's script ran and takes a screenshot. Checked: a timeline per trace
# with its stacked areas (SVG paths) drawn, the peak labelled, the script's success marker
# present and no error marker or uncaught error (Note [Report markers] in
# trace/trace_report.h). Exits 77 (CTest's skip) where chromium is not installed.
#   bash tests/trace_report_chromium_test.sh <memory_lesson> <chunkgrad> <output dir>
set -u
lesson="${1:?usage: trace_report_chromium_test.sh <memory_lesson> <chunkgrad> <output dir>}"
cli="${2:?}"
out="${3:?}"
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "trace_report_chromium: SKIP: no chromium on PATH (apt-get install chromium)"
  exit 77
fi
fail() { echo "trace_report_chromium: FAIL: $*"; exit 1; }

rm -rf "$out" && mkdir -p "$out" || fail "cannot make $out"
# A lesson small enough for a second: four chunks of 64 rows.
OMP_NUM_THREADS=1 "$lesson" --T 256 --D 32 --V 2048 --repeat 1 --chunk-rows 64 --trace-dir "$out/traces" \
  > "$out/lesson.txt" 2>&1 || fail "memory_lesson failed: $(tail -1 "$out/lesson.txt")"
"$cli" trace "$out/traces/trace_naive.json" "$out/traces/trace_chunked.json" "$out/traces/trace_fused.json" \
  --html "$out/report.html" > "$out/trace.txt" 2>&1 || fail "chunkgrad trace failed: $(tail -1 "$out/trace.txt")"

flags=(--headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$out/profile" --enable-logging=stderr
       --v=0)
url="file://$(cd "$out" && pwd)/report.html"
timeout 120 "$browser" "${flags[@]}" --dump-dom "$url" > "$out/dom.html" 2> "$out/chromium_dom.log" ||
  fail "chromium --dump-dom failed: $(tail -3 "$out/chromium_dom.log")"
timeout 120 "$browser" "${flags[@]}" --window-size=1200,2600 --screenshot="$out/report.png" "$url" \
  > /dev/null 2> "$out/chromium_screenshot.log" || fail "chromium --screenshot failed: $(tail -3 "$out/chromium_screenshot.log")"

dom="$out/dom.html"
grep -q 'id="script-error"' "$dom" && fail "the page's script failed: $(grep -o 'id="script-error"[^<]*' "$dom")"
grep -q -i 'Uncaught' "$out/chromium_dom.log" && fail "console error: $(grep -i -m1 Uncaught "$out/chromium_dom.log")"
grep -q 'id="report-ok"' "$dom" || fail "the page's script did not finish (no #report-ok in the DOM)"
timelines=$(grep -o 'data-timelines="[0-9]*"' "$dom" | grep -o '[0-9]*')
[ "$timelines" = 3 ] || fail "expected 3 timelines, the script saw '${timelines}'"
areas=$(grep -o '<path class="area"[^>]* d="M[0-9]' "$dom" | wc -l)
[ "$areas" -ge 6 ] || fail "expected the stacked areas (>= 2 per timeline) drawn as SVG paths, found $areas"
peaks=$(grep -o 'class="peak-label"[^>]*>peak [0-9.]* [KMG]\?i\?B' "$dom" | wc -l)
[ "$peaks" = 3 ] || fail "expected a peak label per timeline, found $peaks"
grep -q 'RowLossBackward:logits' "$dom" || fail "the holders at the peak do not name the logits"
grep -q 'FusedHeadRowsBackward:dh' "$dom" || fail "the holders at the peak do not name dh"
[ "$(stat -c %s "$out/report.png" 2>/dev/null || echo 0)" -gt 10000 ] || fail "no screenshot (or an empty one)"
echo "trace_report_chromium: ok: 3 timelines, $areas areas, 3 peak labels, no script errors"
echo "trace_report_chromium: screenshot: $(cd "$out" && pwd)/report.png"
