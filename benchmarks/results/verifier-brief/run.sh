#!/usr/bin/env bash
# Issue 45, shorter reasoning fields: Diva's verifier writing the answer's few words before its
# yes/no (verify_evidence="brief") instead of copying the passage sentence (the default), on
# the first N ASQA dev questions, paired with zero-shot Diva as a user runs it today
# (benchmarks/results/loop-guard/runs/on, the loop guard on). Typing and rewriting send the
# same prompts as that run, so they are answered from the response cache; the brief votes go
# to the LM; clarify, the writer and closed book are answered from the cache wherever the
# path and passages are unchanged (the verifier's evidence is not passed on), so only a
# question whose path changes pays for a new answer.
#   bash benchmarks/results/verifier-brief/run.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/verifier-brief
N=${1:-60}
ZERO=benchmarks/results/loop-guard/runs/on
echo "$(date -u +%FT%TZ) brief n=$N start" >> "$R/progress.log"
nice ambiqa evaluate diva --data "asqa:dev:$N" --index wiki-dense --metrics str-em,rouge-l \
  --threads 1 --program-config '{"verify_evidence": "brief"}' --out "$R/runs/brief" \
  --resume --retry-errors >> "$R/eval.log" 2>&1
echo "$(date -u +%FT%TZ) brief n=$N done" >> "$R/progress.log"
ambiqa compare "$ZERO" "$R/runs/brief" --out "$R/compare" --metrics str-em,rouge-l
python -m benchmarks.step_replay "$ZERO" "$R/runs/brief" \
  --signature VerifyRetrieval:VerifyRetrievalBrief \
  --title "Diva's verifier: the answer's few words (brief) against a copied sentence" \
  --stored benchmarks/results/compile-v4/runs/diva-zeroshot --data asqa:dev --out "$R"
