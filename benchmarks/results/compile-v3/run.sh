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

# Compile Diva (skipped when the artifact exists), then its dev run on the first 60 ASQA dev
# questions, paired later with the stored runs (--resume continues a stopped run).
compile_and_eval() {  # NAME OPTIMIZER
  local art=$R/$1.json
  if [ ! -f "$art" ]; then
    log "compile $1 start"
    nice ambiqa compile diva --optimizer "$2" --metric dr --predictor-signal --k 2 \
      --train asqa:train:12 --reader $READER --index wiki-dense --threads 2 \
      --out "$art" > "$R/compile-$1.log" 2>&1
    log "compile $1 done"
  fi
  log "eval $1 start"
  nice ambiqa evaluate "$art" --data asqa:dev:60 --index wiki-dense --reader $READER \
    --threads 2 --out "$R/runs/$1" --resume > "$R/eval-$1.log" 2>&1
  log "eval $1 done"
}

# 2-3. Demos chosen by DR (whose ROUGE-L half penalises dropping content) and, for Diva's
#      verifier, typing and rewriting, demos chosen against their own signals, balanced (a yes
#      and a no for the verifier). (Logs of the stored run: compile.log, eval.log.)
compile_and_eval diva-bootstrap-dr-signal bootstrap

# 4. The next recipe the error analysis pointed to: the same signal demos for the inner
#    predictors, the annotators' long answers as the writer's demos (logs of the stored run:
#    compile-labeled.log, eval-labeled.log; stopped at 15 questions).
compile_and_eval diva-labeled-signal labeled
