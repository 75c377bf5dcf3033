#!/usr/bin/env bash
# Issue 46: the ToC compile's shipped program (toc-knn-gold-choice.json: knn gold clarify
# demos, zero-shot writer) on ASQA dev, paired with zero-shot ToC from today's code, both
# scored with the full ASQA set (D-F1 read by the shipped reader v4). Step 1 runs the LM
# (chunks of 5, alternating arms, --resume: ~25 min a chunk of both arms on 2 idle cores);
# step 2 only reads the stored rows.
#   bash benchmarks/results/compile-v5/toc-dev.sh [N]        # both steps
#   bash benchmarks/results/compile-v5/toc-dev.sh report     # step 2 only
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-v5
if [ "${1:-}" != report ]; then
  METRICS=str-em,rouge-l,d-f1,dr bash "$R/dev.sh" "$R/toc-knn-gold-choice.json" \
    toc-knn-writer-none "${1:-60}" toc
fi
ambiqa compare "$R/runs/toc-zeroshot" "$R/runs/toc-knn-writer-none" --out "$R/compare-toc-dev" \
  --metrics str-em,rouge-l,d-f1,dr
python -m benchmarks.readings "$R/runs/toc-zeroshot" "$R/runs/toc-knn-writer-none" \
  --data asqa:dev > "$R/readings-toc-dev.md"
python -m benchmarks.signature_budget "$R/runs/toc-zeroshot" "$R/runs/toc-knn-writer-none" \
  --out "$R/signature-budget-toc-dev" > /dev/null
