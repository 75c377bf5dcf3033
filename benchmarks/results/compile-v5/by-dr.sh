#!/usr/bin/env bash
# Issue 46: the compile-v5 choices were made by `str-rouge` (no D-F1 reader was on the machine
# then). Each candidate's stored validation answers (A.selection.jsonl) read by the shipped
# reader (extractive:minilm-asqa-v4): D-F1 and DR per candidate, and the candidate a
# `--metric dr` compile would have shipped by the same rule (the best DR over the set). No LM call; ~5 min on 2 cores.
#   bash benchmarks/results/compile-v5/by-dr.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-v5
for name in diva-labeled-choice diva-labeled-choice-form diva-writer-signal \
    diva-clarify-signal diva-clarify-gold toc-knn-gold-choice; do
  python -m benchmarks.compile_choice "$R/$name.json" --data asqa:train:36 --reader shipped \
    --out "$R/by-dr/$name.md" > /dev/null
  grep -o 'such a compile would have shipped [^|]*' "$R/by-dr/$name.md" | sed "s/^/$name: /"
done
