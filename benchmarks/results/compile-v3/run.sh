#!/usr/bin/env bash
# Issue 34's compile row at n = 60 (default 1.5B, dense index, reader v3), run serially in the
# background with resume. Each step is skipped when its output exists.
#   AMBIQA_CACHE=... bash benchmarks/results/compile-v3/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-v3
READER=extractive:minilm-asqa-v3
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/progress.log"; }

# 1. The LM reader on the reader yardstick (ASQA dev reference long answers), with its cost.
log "lm-reader start"
nice python -m benchmarks.reader_lm_ceiling --lm embedded --n 10 > "$R/lm-reader.log" 2>&1 || log "lm-reader FAILED"
log "lm-reader done"

# 2. Compile Diva: bootstrap demos chosen by DR (its ROUGE-L half penalises dropping content),
#    then each inner predictor's demos chosen against its own signal (balanced yes/no verifier).
ART=$R/diva-bootstrap-dr-signal.json
if [ ! -f "$ART" ]; then
  log "compile start"
  nice ambiqa compile diva --optimizer bootstrap --metric dr --predictor-signal --k 2 \
    --train asqa:train:12 --reader $READER --index wiki-dense --threads 2 \
    --out "$ART" > "$R/compile.log" 2>&1
  log "compile done"
fi

# 3. Its dev run on the first 60 ASQA dev questions, paired with the stored runs.
log "eval start"
nice ambiqa evaluate "$ART" --data asqa:dev:60 --index wiki-dense --reader $READER --threads 2 \
  --out "$R/runs/diva-bootstrap-dr-signal" --resume > "$R/eval.log" 2>&1
log "eval done"

# 4. The next recipe the error analysis points to: the same signal demos for the inner
#    predictors, the annotators' long answers as the writer's demos (labeled). Evaluated as far
#    as machine time allows (--resume continues it).
ART2=$R/diva-labeled-signal.json
if [ ! -f "$ART2" ]; then
  log "compile labeled+signal start"
  nice ambiqa compile diva --optimizer labeled --metric dr --predictor-signal --k 2 \
    --train asqa:train:12 --reader $READER --index wiki-dense --threads 2 \
    --out "$ART2" > "$R/compile-labeled.log" 2>&1
  log "compile labeled+signal done"
fi
log "eval labeled+signal start"
nice ambiqa evaluate "$ART2" --data asqa:dev:60 --index wiki-dense --reader $READER --threads 2 \
  --out "$R/runs/diva-labeled-signal" --resume > "$R/eval-labeled.log" 2>&1
log "eval labeled+signal done"
