#!/usr/bin/env bash
# The short CPU version of the rotated-MNIST table (issue 33): all ten of the papers' networks, in budgets
# a shared CPU can give them, within a wall-time limit (default 60 minutes), one torch thread, nice 15.
#
#     benchmarks/nets_cpu_short.sh OUT_DIR [MINUTES [TIERS]]
#
# Appends one JSON line per finished run to OUT_DIR/runs.jsonl (a stopped run keeps its rows), saves the
# trained state dicts to OUT_DIR/states/ (for nets_equivariance.py --states) and prints the table at the
# end (python benchmarks/nets_compare.py --table-from OUT_DIR/runs.jsonl prints it at any time).
# Budgets (train digits / epochs / batch / test digits), in order of priority; the cheap reference models
# run again at the small budgets, so that every budget has a baseline measured at the same budget.  One
# training step of GSA-R4 takes ~8 s per image on one core, GSA-R8 ~40 s, GSA-R16 minutes: the GSA-Nets
# get a token budget, every model gets seed 0 before any gets seeds 1 and 2, GSA-R16 comes last.
#   A    cnn, p4cnn, aF-p4cnn, p4mcnn   1,000 / 2 / 32 / 500, seeds 0,1,2
#   B    a-p4cnn (+ p4cnn)                100 / 1 / 16 / 100, seeds 0,1,2
#   C    cnn, z2sa, gsa-r4 (no invariance)  4 / 1 / 2 / 10, seed 0
#   C8   gsa-r8                             2 / 1 / 2 / 4,  seed 0
#   C12  gsa-r12                            1 / 1 / 1 / 2,  seed 0
#   D    cnn, z2sa, gsa-r4                  budget C, seeds 1,2
#   E    gsa-r8                             budget C8, seeds 1,2
#   F    gsa-r16                            1 / 1 / 1 / 2,  seed 0
set -u
OUT=${1:?usage: nets_cpu_short.sh OUT_DIR [MINUTES [TIERS]]}
MINUTES=${2:-60}
TIERS=${3:-"A B C C8 C12 D E F"}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
END=$(( $(date +%s) + 60 * MINUTES ))
tier() {  # tier LABEL ARGS...: runs nets_compare.py until the global deadline
    case " $TIERS " in *" $1 "*) ;; *) return ;; esac
    local left=$(( END - $(date +%s) ))
    if (( left < 30 )); then echo "[$1] not started: the ${MINUTES}-minute limit is reached"; return; fi
    echo "[$1] $(date -u +%H:%M:%S) start, ${left} s left"
    shift
    timeout "$left" nice -n 15 python "$HERE/nets_compare.py" --threads 1 --jsonl "$OUT/runs.jsonl" \
        --states "$OUT/states" --time-budget $(( left - 30 )) "$@" || echo "  (stopped or failed: rc $?)"
}
NOINV="--epochs 1 --no-invariance"
tier A --models cnn,p4cnn,aF-p4cnn,p4mcnn --seeds 0,1,2 --n-train 1000 --epochs 2 --batch 32 --n-test 500 \
    --eval-subset 100
tier B --models a-p4cnn,p4cnn --seeds 0,1,2 --n-train 100 --epochs 1 --batch 16 --n-test 100 --eval-subset 20
tier C --models cnn,z2sa,gsa-r4 --seeds 0 --n-train 4 --batch 2 --n-test 10 $NOINV
tier C8 --models gsa-r8 --seeds 0 --n-train 2 --batch 2 --n-test 4 $NOINV
tier C12 --models gsa-r12 --seeds 0 --n-train 1 --batch 1 --n-test 2 $NOINV
tier D --models cnn,z2sa,gsa-r4 --seeds 1,2 --n-train 4 --batch 2 --n-test 10 $NOINV
tier E --models gsa-r8 --seeds 1,2 --n-train 2 --batch 2 --n-test 4 $NOINV
tier F --models gsa-r16 --seeds 0 --n-train 1 --batch 1 --n-test 2 $NOINV
echo "[done] $(date -u +%H:%M:%S)"
python "$HERE/nets_compare.py" --table-from "$OUT/runs.jsonl"
