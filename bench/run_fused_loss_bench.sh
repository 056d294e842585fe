#!/usr/bin/env bash
# Why this file exists: one command for issue 12's head-loss table on a GPU machine: builds
# bench/fused_loss_bench (Release, CUDA) unless BUILD_DIR already has it, then runs it and
# bench/fused_loss_torch.py (when python3 can import torch) on the issue's shapes:
#   KL + CE mix, shared frozen head, T=24576 D=5120 V=248320
#   CE, trainable head, the same shape; 16384 x 4096 x 128256; 8192 x 2304 x 256000
#   bash bench/run_fused_loss_bench.sh                     # --repeats 5, every path
#   REPEATS=3 PATHS=fused,chunked,floor bash bench/run_fused_loss_bench.sh
# PATHS is chunkgrad's list (floor,fused,fused-pipelined,chunked,naive: fused is the
# one-stream loop, head_loss's default; fused-pipelined the side-stream one); TORCH_PATHS PyTorch's.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_build.sh"
repeats="${REPEATS:-5}"
paths="${PATHS:-floor,fused,fused-pipelined,chunked,naive}"
torch_paths="${TORCH_PATHS:-fused,chunked,naive}"
if [[ ! -x "$bench_dir/bench/fused_loss_bench" ]]; then bench_build fused_loss_bench; fi
have_torch=0
if python3 -c "import torch" 2>/dev/null; then have_torch=1; fi

shapes=(
  "--loss kl --head frozen --ce-weight 0.1 --T 24576 --D 5120 --V 248320"
  "--loss ce --head trainable --T 24576 --D 5120 --V 248320"
  "--loss ce --head trainable --T 16384 --D 4096 --V 128256"
  "--loss ce --head trainable --T 8192 --D 2304 --V 256000"
)
for s in "${shapes[@]}"; do
  echo
  # shellcheck disable=SC2086
  "$bench_dir/bench/fused_loss_bench" $s --repeats "$repeats" --paths "$paths"
  if [[ $have_torch == 1 ]]; then
    # shellcheck disable=SC2086
    python3 "$bench_root/bench/fused_loss_torch.py" $s --repeats "$repeats" --paths "$torch_paths"
  else
    echo "(python3 cannot import torch here: the PyTorch rows are skipped)"
  fi
done
