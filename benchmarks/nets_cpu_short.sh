#!/usr/bin/env bash
# The short CPU version of the rotated-MNIST table (issue 33): all ten of the papers' networks, in budgets
# a shared CPU can give them, within a wall-time limit (default 60 minutes), one torch thread, nice 15.
#
#     benchmarks/nets_cpu_short.sh OUT_DIR [MINUTES]
#
# Appends one JSON line per finished run to OUT_DIR/runs.jsonl (a stopped run keeps its rows), saves the
# trained state dicts to OUT_DIR/states/ (for nets_equivariance.py --states) and prints the table at the
# end (python benchmarks/nets_compare.py --table-from OUT_DIR/runs.jsonl prints it at any time).
# Budgets, in order of priority (the cheap reference models run again at the small budgets, so that every
# budget has a baseline measured at the same budget):
#   A  cnn, p4cnn, aF-p4cnn, p4mcnn      1,000 train / 2 epochs / batch 32 / 500 test, seeds 0,1,2
#   B  a-p4cnn (+ p4cnn)                   100 train / 1 epoch  / batch 16 / 100 test, seeds 0,1,2
#   C  z2sa, gsa-r4 ... gsa-r16 (+ cnn)     seed 0 first: 4 train / 1 epoch / batch 2 / 10 test, no invariance
#   D  z2sa, gsa-r4 (+ cnn)                 seeds 1,2 at budget C
set -u
OUT=${1:?usage: nets_cpu_short.sh OUT_DIR [MINUTES]}
MINUTES=${2:-60}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
END=$(( $(date +%s) + 60 * MINUTES ))
tier() {  # tier LABEL ARGS...: runs nets_compare.py until the global deadline
    local left=$(( END - $(date +%s) ))
    if (( left < 30 )); then echo "[$1] not started: the ${MINUTES}-minute limit is reached"; return; fi
    echo "[$1] $(date -u +%H:%M:%S) start, ${left} s left"
    shift
    timeout "$left" nice -n 15 python "$HERE/nets_compare.py" --threads 1 --jsonl "$OUT/runs.jsonl" \
        --states "$OUT/states" --time-budget $(( left - 30 )) "$@" || echo "  (stopped or failed: rc $?)"
}
tier A --models cnn,p4cnn,aF-p4cnn,p4mcnn --seeds 0,1,2 --n-train 1000 --epochs 2 --batch 32 --n-test 500 \
    --eval-subset 100
tier B --models a-p4cnn,p4cnn --seeds 0,1,2 --n-train 100 --epochs 1 --batch 16 --n-test 100 --eval-subset 20
tier C --models cnn,z2sa,gsa-r4,gsa-r8,gsa-r12,gsa-r16 --seeds 0 --n-train 4 --epochs 1 --batch 2 --n-test 10 \
    --no-invariance
tier D --models cnn,z2sa,gsa-r4 --seeds 1,2 --n-train 4 --epochs 1 --batch 2 --n-test 10 --no-invariance
echo "[done] $(date -u +%H:%M:%S)"
python "$HERE/nets_compare.py" --table-from "$OUT/runs.jsonl"
