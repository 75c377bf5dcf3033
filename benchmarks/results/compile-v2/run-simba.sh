#!/usr/bin/env bash
# The SIMBA half of run.sh, re-sized after the GEPA run measured ~4-5 minutes per Diva run of
# the 0.5B on the shared 2-core machine (other helpers' LM jobs ran at the same time): one
# training question, mini-batch 1, 2 candidates, 1 step -- about 5 program runs and one rule.
# Waits for the GEPA compile (pid given as $1) to end first.
set -u
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
export AMBIQA_CACHE=${AMBIQA_CACHE:-/work/cache}
OUT=benchmarks/results/compile-v2
step() { echo "== $(date -u +%H:%M:%S) $*" >> "$OUT/progress.log"; }
if [ -n "${1:-}" ]; then while kill -0 "$1" 2> /dev/null; do sleep 20; done; fi
step "gepa process ended; artifact: $(ls "$OUT"/diva-gepa.json 2>/dev/null)"
METRIC=str-em
if ls "$AMBIQA_CACHE"/readers/*/config.json > /dev/null 2>&1; then METRIC=d-f1; fi
if [ ! -f "$OUT/diva-simba.json" ]; then
  step "simba start (metric $METRIC)"
  /usr/bin/time -v ambiqa compile diva --optimizer simba --train asqa:train:1 --metric "$METRIC" \
    --simba-steps 1 --simba-bsize 1 --num-candidates 2 --k 1 --max-lm-calls 60 \
    --out "$OUT/diva-simba.json" --lm embedded:qwen2.5-coder-0.5b --index dense:wiki-dense \
    --program-config '{"top_k": 3, "k_per_query": 3, "max_interpretations": 2}' \
    > "$OUT/diva-simba.log" 2>&1
  step "simba rc=$?"
fi
for a in gepa simba; do
  [ -f "$OUT/diva-$a.json" ] && ambiqa export "$OUT/diva-$a.json" --format md \
    --out "$OUT/diva-$a.prompts.md" >> "$OUT/progress.log" 2>&1
done
step done
