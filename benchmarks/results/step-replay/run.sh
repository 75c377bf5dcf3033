#!/usr/bin/env bash
# Issue 45, fewer output tokens where they do not carry the answer: zero-shot Diva with one
# step's prompt changed, on the first N ASQA dev questions, paired with zero-shot Diva as a
# user runs it today (benchmarks/results/loop-guard/runs/on, the loop guard on). Every call
# whose prompt is unchanged is answered from the response cache, so only the changed step --
# and whatever its output changes downstream -- reaches the LM.
#   brief     the verifier writes the answer's few words, not a sentence (verify_evidence)
#   words-W   the writer is asked to keep its answer under W words (answer_words)
#   bash benchmarks/results/step-replay/run.sh ARM [N]
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/step-replay
ARM=${1:?usage: run.sh brief|words-W [N]}
N=${2:-60}
ZERO=benchmarks/results/loop-guard/runs/on
case "$ARM" in
  brief) CONFIG='{"verify_evidence": "brief"}'; SIG=VerifyRetrieval:VerifyRetrievalBrief
         TITLE="Diva's verifier: the answer's few words (brief) against a copied sentence" ;;
  words-*) W=${ARM#words-}; CONFIG="{\"answer_words\": $W}"; SIG=WriteLongAnswer
           TITLE="Diva's writer asked to keep its answer under $W words, against the default" ;;
  *) echo "unknown arm $ARM (brief, words-W)" >&2; exit 2 ;;
esac
echo "$(date -u +%FT%TZ) $ARM n=$N start" >> "$R/progress.log"
nice ambiqa evaluate diva --data "asqa:dev:$N" --index wiki-dense --metrics str-em,rouge-l \
  --threads 1 --program-config "$CONFIG" --out "$R/runs/$ARM" --resume --retry-errors \
  >> "$R/eval-$ARM.log" 2>&1
echo "$(date -u +%FT%TZ) $ARM n=$N done" >> "$R/progress.log"
ambiqa compare "$ZERO" "$R/runs/$ARM" --out "$R/compare-$ARM" --metrics str-em,rouge-l
python -m benchmarks.step_replay "$ZERO" "$R/runs/$ARM" --signature "$SIG" --title "$TITLE" \
  --stored benchmarks/results/compile-v4/runs/diva-zeroshot --data asqa:dev --out "$R/$ARM"
python -m benchmarks.readings "$ZERO" "$R/runs/$ARM" --data asqa:dev > "$R/$ARM/readings.md"
