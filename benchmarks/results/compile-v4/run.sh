#!/usr/bin/env bash
# Issue 46, the runs that need no new code: zero-shot Diva from today's code and Diva with the
# compile-v3 signal demos on its inner predictors (typing, rewriting, verifier) but no demos
# for clarify, the writer and closed book (diva-signal-inner-writer0.json, composed from
# ../compile-v3/diva-bootstrap-dr-signal.json by dropping those three predictors' demos).
# Both on the first N ASQA dev questions, alternating in chunks of 5 so that the two arms stay
# paired whenever the run is stopped; --resume continues. D-F1 is left out here (no reader v3
# on this machine); the rows keep the long answers, so benchmarks.reader_rescore adds it later
# without an LM call. --retry-errors: a question that failed (an LM call past its deadline on
# a loaded machine) is asked again by the next chunk rather than kept as a 0.
#   AMBIQA_CACHE=... bash benchmarks/results/compile-v4/run.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-v4
N=${1:-60}
CORPUS=../shared/data/corpus/wiki_passages.jsonl
INDEXES="$(python -c 'from ambiqa.paths import index_root; print(index_root())')"
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/progress.log"; }
[ -f "$INDEXES/wiki-dense/manifest.json" ] || {
  log "index wiki-dense start"; ambiqa index "$CORPUS" --name wiki-dense --kind dense; }
for ((n = 5; n <= N; n += 5)); do
  for arm in diva-zeroshot diva-signal-inner-writer0; do
    target=diva; [ "$arm" = diva-zeroshot ] || target=$R/$arm.json
    log "eval $arm n=$n start"
    nice ambiqa evaluate "$target" --data "asqa:dev:$n" --index wiki-dense \
      --metrics str-em,rouge-l --threads 2 --out "$R/runs/$arm" --resume --retry-errors \
      >> "$R/eval-$arm.log" 2>&1 || log "eval $arm n=$n FAILED"
    log "eval $arm n=$n done"
  done
done
