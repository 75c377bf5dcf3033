#!/usr/bin/env bash
# Issue 46: one more ambiguity program compiled the same way -- Tree of Clarifications, with
# the teleprompter its paper implies (`knn --knn-gold-only`: each question's clarify and writer
# demos are the nearest gold exemplars from the training split, no LM call; ToC retrieves its
# few-shot exemplars by similarity). The same 12 held-out training questions as Diva's run
# (same --train, --select-val and seed), the same objective (str-rouge, no reader on this
# machine), and ToC's default candidates: zero-shot, the input, the knn program, and the knn
# program with the writer's demos removed, with one gold writer demo, and with clarify's and
# the writer's removed. Rerunning replays the LM calls made so far from the response cache.
#   bash benchmarks/results/compile-v5/run-toc.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-v5
echo "$(date -u +%FT%TZ) toc compile start" >> "$R/progress.log"
nice ambiqa compile toc --train asqa:train:36 --select-val 12 --optimizer knn --knn-gold-only \
  --k 2 --metric str-rouge --index wiki-dense --threads 2 \
  --out "$R/toc-knn-gold-choice.json" 2>&1 | tee -a "$R/compile-toc.log"
echo "$(date -u +%FT%TZ) toc compile done" >> "$R/progress.log"
