#!/usr/bin/env bash
# Issue 46: ToC compiled the way Diva's DR compile was (compile.sh): the same 24 + 12 training
# questions, seed, objective (DR as ASQA defines it, D-F1 read by the shipped reader v4) and
# candidates -- one gold writer demo picked by its form on zero-shot ToC, and that writer with
# clarify's one gold demo. `--optimizer none`: the program given is zero-shot ToC, so
# zero-shot, input and "none" are one candidate. A writer-only candidate pays only its writer
# calls (the call memo answers the tree from zero-shot's). Default 1.5B, dense index.
#   bash benchmarks/results/compile-dr/compile-toc.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-dr
echo "$(date -u +%FT%TZ) compile toc-dr start" >> "$R/progress.log"
nice ambiqa compile toc --train asqa:train:36 --select-val 12 --optimizer none --k 2 \
  --metric dr --candidates "writer=gold:1;clarify=gold:1,writer=gold:1" --index wiki-dense \
  --threads 2 --out "$R/toc-dr.json" 2>&1 | tee -a "$R/compile-toc-dr.log"
echo "$(date -u +%FT%TZ) compile toc-dr done" >> "$R/progress.log"
