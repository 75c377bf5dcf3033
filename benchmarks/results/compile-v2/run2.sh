#!/usr/bin/env bash
# Run 2 (after run 1's lessons, see README.md): GEPA and SIMBA on Diva with D-F1 read by the
# extractive reader (extractive:minilm-asqa-v3, no LM call per score; run 1's GEPA started
# before it was the default and scored with the LM stand-in reader, whose calls spent most of
# its LM-call budget). 0.5B embedded LM, dense index, small Diva (6 LM calls a question).
set -u
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
export AMBIQA_CACHE=${AMBIQA_CACHE:-/work/cache}
OUT=benchmarks/results/compile-v2
COMMON=(--metric d-f1 --reader extractive --lm embedded:qwen2.5-coder-0.5b
        --index dense:wiki-dense
        --program-config '{"top_k": 3, "k_per_query": 3, "max_interpretations": 2}')
step() { echo "== $(date -u +%H:%M:%S) $*" >> "$OUT/progress.log"; }
if [ ! -f "$OUT/diva-gepa.json" ]; then
  step "gepa start"
  /usr/bin/time -v ambiqa compile diva --optimizer gepa --train asqa:train:4 \
    --gepa-rollouts 8 --gepa-selector all --reflection-minibatch 2 --max-lm-calls 70 \
    --out "$OUT/diva-gepa.json" "${COMMON[@]}" > "$OUT/diva-gepa.log" 2>&1
  step "gepa rc=$?"
fi
if [ ! -f "$OUT/diva-simba.json" ]; then
  step "simba start"
  /usr/bin/time -v ambiqa compile diva --optimizer simba --train asqa:train:2 \
    --simba-steps 1 --simba-bsize 2 --num-candidates 2 --k 1 --max-lm-calls 80 \
    --out "$OUT/diva-simba.json" "${COMMON[@]}" > "$OUT/diva-simba.log" 2>&1
  step "simba rc=$?"
fi
for a in gepa simba; do
  [ -f "$OUT/diva-$a.json" ] && ambiqa export "$OUT/diva-$a.json" --format md \
    --out "$OUT/diva-$a.prompts.md" >> "$OUT/progress.log" 2>&1
done
step done
