#!/usr/bin/env bash
# Issue 46: a compile-v5 program on ASQA dev, paired with the zero-shot program from today's
# code (Diva: compile-v4's zero-shot arm; ToC: runs/toc-zeroshot; same flags, index and LM). Chunks of 5, alternating, so
# the two arms stay paired whenever the run is stopped; --resume continues. Diva's arms score
# STR-EM and ROUGE-L only (they began while no reader was on the machine; D-F1 is read
# afterwards by benchmarks/add_d_f1.py); a run that starts now may set METRICS to the full
# ASQA set, read by the shipped reader (ToC's arms do: METRICS=str-em,rouge-l,d-f1,dr).
#   [METRICS=...] bash benchmarks/results/compile-v5/dev.sh ARTIFACT RUN_NAME [N] [PROGRAM]
#   e.g. bash benchmarks/results/compile-v5/dev.sh benchmarks/results/compile-v5/toc-knn-gold-choice.json toc-knn-writer-none 60 toc
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-v5
ART=${1:?artifact to evaluate}
NAME=${2:?run name under $R/runs}
N=${3:-60}
PROGRAM=${4:-diva}
METRICS=${METRICS:-str-em,rouge-l}
if [ "$PROGRAM" = diva ]; then ZERO=benchmarks/results/compile-v4/runs/diva-zeroshot
else ZERO=$R/runs/$PROGRAM-zeroshot; fi
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/progress.log"; }
# rows without an error in a run: a chunk the run already holds is skipped, so a resume does
# not rewrite the run's summary with a narrower --data while the loop catches up
answered() { [ -f "$1/results.jsonl" ] && python3 -c 'import json,sys
print(sum(1 for l in open(sys.argv[1]) if l.strip() and not json.loads(l).get("error")))' \
  "$1/results.jsonl" || echo 0; }
for ((n = 5; n <= N; n += 5)); do
  for arm in "$PROGRAM-zeroshot" "$NAME"; do
    if [ "$arm" = "$PROGRAM-zeroshot" ]; then target=$PROGRAM; out=$ZERO
    else target=$ART; out=$R/runs/$NAME; fi
    if [ "$(answered "$out")" -ge "$n" ]; then continue; fi
    log "eval $arm n=$n start"
    nice ambiqa evaluate "$target" --data "asqa:dev:$n" --index wiki-dense \
      --metrics "$METRICS" --threads 2 --out "$out" --resume --retry-errors \
      >> "$R/eval-$arm.log" 2>&1 || log "eval $arm n=$n FAILED"
    log "eval $arm n=$n done"
  done
done
