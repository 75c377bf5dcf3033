#!/usr/bin/env bash
# Issue 46 with the loop guard (issue 45): the two compiled dev arms replayed with today's code
# (the guard on, as every user now runs), paired with zero-shot Diva replayed the same way
# (benchmarks/results/loop-guard/runs/on). Every reply the arms already made is answered from
# the response cache and cut by the guard where it looped; a call whose prompt changed because
# an earlier reply was cut goes to the LM.
#   bash benchmarks/results/compile-v5/guarded.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-v5
N=${1:-60}
ZERO=benchmarks/results/loop-guard/runs/on
for name in diva-clarify-signal diva-clarify-gold; do
  nice ambiqa evaluate "$R/$name.json" --data "asqa:dev:$N" --index wiki-dense \
    --metrics str-em,rouge-l --threads 2 --out "$R/runs/$name-guarded" --resume \
    --retry-errors >> "$R/eval-$name-guarded.log" 2>&1
done
ambiqa compare "$ZERO" "$R/runs/diva-clarify-signal-guarded" "$R/runs/diva-clarify-gold-guarded" \
  --out "$R/compare-dev-guarded" --metrics str-em,rouge-l
python -m benchmarks.readings "$ZERO" "$R/runs/diva-clarify-signal-guarded" \
  "$R/runs/diva-clarify-gold-guarded" --data asqa:dev > "$R/readings-dev-guarded.md"
