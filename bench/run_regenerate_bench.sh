#!/usr/bin/env bash
# Why this file exists: one command for `chunkgrad regenerate`'s GPU throughput against
# transformers' generate() on the same random-weight Qwen3 and prompts
# (bench/regenerate_torch.py). Run from the repository root on the device, after a CUDA
# build (build-cuda/):
#   OUT_DIR=$OUT/regen SHAPE=0.6b bash bench/run_regenerate_bench.sh
# Prints both "new tokens/s" lines; OUT_DIR keeps the output JSONL and the logs.
set -euo pipefail
OUT_DIR=${OUT_DIR:-/tmp/regen_bench}
SHAPE=${SHAPE:-0.6b}
SAMPLES=${SAMPLES:-128}
NEW=${NEW:-128}
BATCH=${BATCH:-64}
CLI=${CLI:-build-cuda/examples/chunkgrad}
mkdir -p "$OUT_DIR"
WORK=${WORK:-/tmp/regen_bench_work}
python3 bench/regenerate_torch.py --out "$WORK" --shape "$SHAPE" --samples "$SAMPLES" \
  --max-new-tokens "$NEW" --batch-size "$BATCH" 2>&1 | tee "$OUT_DIR/torch.log"
# --eos-ids of a token random weights almost never pick, so every row runs NEW tokens as
# transformers' rows do (min_new_tokens there).
for dtype in bf16; do
  rm -f "$WORK/out_$dtype.jsonl" "$WORK/out_$dtype.jsonl.options.json"
  "$CLI" regenerate --target "$WORK/target" --data "$WORK/data.jsonl" \
    --out "$WORK/out_$dtype.jsonl" --max-new-tokens "$NEW" --batch-size "$BATCH" \
    --eos-ids 151643 --device cuda --dtype "$dtype" --no-progress 2>&1 | tee "$OUT_DIR/chunkgrad_$dtype.log"
  head -c 2000 "$WORK/out_$dtype.jsonl" > "$OUT_DIR/out_${dtype}_head.jsonl"
done
