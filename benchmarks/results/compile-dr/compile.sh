#!/usr/bin/env bash
# Issue 46: a compile ranked by DR as ASQA defines it (sqrt(mean D-F1 x mean ROUGE-L) over the
# validation set, D-F1 read by the shipped reader v4), on the same 24 + 12 training questions,
# seed and upstream as compile-v5. Candidates: the two that DR would have preferred in
# compile-v5's stored Diva selections (compile-v5/by-dr) -- one gold writer demo picked by its
# form on the zero-shot program -- and that writer with clarify's one gold demo (clarify=gold:1
# named more readings on dev, compile-v5). `--optimizer none`: the program given is zero-shot,
# so zero-shot, input and "none" are one candidate. A writer-only candidate pays only its
# writer calls (the call memo answers the rest from zero-shot's). Default 1.5B, dense index.
#   bash benchmarks/results/compile-dr/compile.sh [diva|toc]   # -> diva-dr.json | toc-dr.json
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-dr
P=${1:-diva}
echo "$(date -u +%FT%TZ) compile $P-dr start" >> "$R/progress.log"
nice ambiqa compile "$P" --train asqa:train:36 --select-val 12 --optimizer none --k 2 \
  --metric dr --candidates "writer=gold:1;clarify=gold:1,writer=gold:1" --index wiki-dense \
  --threads 2 --out "$R/$P-dr.json" 2>&1 | tee -a "$R/compile-$P-dr.log"
echo "$(date -u +%FT%TZ) compile $P-dr done" >> "$R/progress.log"
