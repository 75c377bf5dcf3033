#!/usr/bin/env bash
# Issue 45, fewer output tokens where they do not carry the answer: Diva's writer asked to keep
# its answer under WORDS words (answer_words), on the first N ASQA dev questions, paired with
# zero-shot Diva as a user runs it today (benchmarks/results/loop-guard/runs/on, the loop
# guard on). Every call before the writer sends the same prompt as that run and is answered
# from the response cache; only the writer's calls reach the LM.
#   bash benchmarks/results/writer-words/run.sh [N] [WORDS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/writer-words
N=${1:-60}
W=${2:-100}
ZERO=benchmarks/results/loop-guard/runs/on
echo "$(date -u +%FT%TZ) words=$W n=$N start" >> "$R/progress.log"
nice ambiqa evaluate diva --data "asqa:dev:$N" --index wiki-dense --metrics str-em,rouge-l \
  --threads 1 --program-config "{\"answer_words\": $W}" --out "$R/runs/words-$W" \
  --resume --retry-errors >> "$R/eval-$W.log" 2>&1
echo "$(date -u +%FT%TZ) words=$W n=$N done" >> "$R/progress.log"
ambiqa compare "$ZERO" "$R/runs/words-$W" --out "$R/compare-$W" --metrics str-em,rouge-l
python -m benchmarks.step_replay "$ZERO" "$R/runs/words-$W" --signature WriteLongAnswer \
  --title "Diva's writer asked to keep its answer under $W words, paired with the default" \
  --stored benchmarks/results/compile-v4/runs/diva-zeroshot --data asqa:dev --out "$R/words-$W"
python -m benchmarks.readings "$ZERO" "$R/runs/words-$W" --data asqa:dev > "$R/readings-$W.md"
