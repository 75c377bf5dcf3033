#!/usr/bin/env bash
# Issue 34 items 3: one real GEPA and one real SIMBA compile of Diva with the embedded 0.5B
# reflecting on (and writing rules for) itself, then a small paired check on ASQA dev.
# Run from the repo root, in the background:  nohup nice -n 10 bash benchmarks/results/compile-v2/run.sh &
# Metric: d-f1 when a trained extractive reader is in the cache (no LM call per score), else
# str-em (reader-free): D-F1 with the LM stand-in reader would add one LM call per gold pair
# to every score. progress.log records which.
set -u
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
export AMBIQA_CACHE=${AMBIQA_CACHE:-/work/cache}
OUT=benchmarks/results/compile-v2
LM=(--lm embedded:qwen2.5-coder-0.5b --index dense:wiki-dense)
# a small Diva (3 passages, 2 readings -> 6 LM calls a question) so the runs fit the session:
# on the shared 2-core machine one 0.5B call took ~20-60 s while these ran
CFG=(--program-config '{"top_k": 3, "k_per_query": 3, "max_interpretations": 2}')
step() { echo "== $(date -u +%H:%M:%S) $*" >> "$OUT/progress.log"; }
METRIC=str-em
EVAL=str-em,rouge-l
if ls "$AMBIQA_CACHE"/readers/*/config.json > /dev/null 2>&1; then METRIC=d-f1; EVAL=$EVAL,d-f1,dr; fi
step "metric $METRIC (readers: $(ls "$AMBIQA_CACHE"/readers 2>/dev/null | tr '\n' ' '))"

if [ ! -f "$OUT/diva-gepa.json" ]; then
  step "gepa start"
  /usr/bin/time -v ambiqa compile diva --optimizer gepa --train asqa:train:4 --metric "$METRIC" \
    --gepa-rollouts 8 --gepa-selector all --reflection-minibatch 2 --max-lm-calls 90 \
    --out "$OUT/diva-gepa.json" "${LM[@]}" "${CFG[@]}" > "$OUT/diva-gepa.log" 2>&1
  step "gepa rc=$?"
fi
if [ ! -f "$OUT/diva-simba.json" ]; then
  step "simba start"
  /usr/bin/time -v ambiqa compile diva --optimizer simba --train asqa:train:2 --metric "$METRIC" \
    --simba-steps 1 --simba-bsize 2 --num-candidates 2 --k 1 --max-lm-calls 130 \
    --out "$OUT/diva-simba.json" "${LM[@]}" "${CFG[@]}" > "$OUT/diva-simba.log" 2>&1
  step "simba rc=$?"
fi
for a in gepa simba; do
  [ -f "$OUT/diva-$a.json" ] && ambiqa export "$OUT/diva-$a.json" --format md \
    --out "$OUT/diva-$a.prompts.md" >> "$OUT/progress.log" 2>&1
done
# paired, same first 6 ASQA dev questions, same LM and index
for t in diva "$OUT/diva-gepa.json" "$OUT/diva-simba.json"; do
  name=$(basename "$t" .json)
  [ "$t" = diva ] && name=diva-zero-shot
  [ -e "$t" ] || [ "$t" = diva ] || continue
  [ -f "$OUT/dev6-$name/summary.json" ] && continue
  step "evaluate $name"
  cfg=(); [ "$t" = diva ] && cfg=("${CFG[@]}")
  ambiqa evaluate "$t" --data asqa:dev:6 --metrics "$EVAL" --out "$OUT/dev6-$name" \
    "${LM[@]}" "${cfg[@]}" > "$OUT/dev6-$name.log" 2>&1
  step "evaluate $name rc=$?"
done
# predictor signals (item 2): bootstrap + signal demos, then each predictor against its signal
if [ ! -f "$OUT/diva-signal.json" ]; then
  step "signal start"
  ambiqa compile diva --optimizer bootstrap --predictor-signal --train asqa:train:4 \
    --metric "$METRIC" --k 2 --max-lm-calls 60 --out "$OUT/diva-signal.json" "${LM[@]}" "${CFG[@]}" \
    > "$OUT/diva-signal.log" 2>&1
  step "signal rc=$?"
fi
if [ -f "$OUT/diva-signal.json" ] && [ ! -f "$OUT/dev6-diva-signal/summary.json" ]; then
  step "evaluate diva-signal"
  ambiqa evaluate "$OUT/diva-signal.json" --data asqa:dev:6 --metrics "$EVAL" \
    --out "$OUT/dev6-diva-signal" "${LM[@]}" > "$OUT/dev6-diva-signal.log" 2>&1
  step "evaluate diva-signal rc=$?"
fi
python -m benchmarks.predictor_signal "$OUT"/dev6-* --out "$OUT/predictor-signal" \
  >> "$OUT/progress.log" 2>&1
step done
