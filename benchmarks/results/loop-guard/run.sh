#!/usr/bin/env bash
# Issue 45: the loop guard's effect on zero-shot Diva's ASQA dev answers, paired, both arms
# replayed from the response cache with today's code (see benchmarks/loop_replay.py).
#   bash benchmarks/results/loop-guard/run.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/loop-guard
N=${1:-60}
ARGS=(diva --data "asqa:dev:$N" --index wiki-dense --metrics str-em,rouge-l --threads 1 --resume)
nice -n 19 python -m benchmarks.loop_replay off -- "${ARGS[@]}" --out "$R/runs/off" > "$R/off.log" 2>&1
nice -n 19 ambiqa evaluate "${ARGS[@]}" --out "$R/runs/on" > "$R/on.log" 2>&1
python -m benchmarks.loop_replay summary "$R/runs/off" "$R/runs/on" \
  --stored benchmarks/results/compile-v4/runs/diva-zeroshot --out "$R"
ambiqa compare "$R/runs/off" "$R/runs/on" --out "$R/compare" --metrics str-em,rouge-l
