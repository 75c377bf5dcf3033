#!/usr/bin/env bash
# Run 3: the default 1.5B reflects on the 0.5B's runs. Runs 1-2 scored every D-F1 0 (v3
# reader) or near it, so nothing could be accepted; STR-EM (reader-free) gives the search a
# signal on these questions. Task runs repeat run 1's prompts (DSPy cache), so most LM time
# goes to the 1.5B's reflections and to scoring the candidates they propose.
set -u
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
export AMBIQA_CACHE=${AMBIQA_CACHE:-/work/cache}
OUT=benchmarks/results/compile-v2
step() { echo "== $(date -u +%H:%M:%S) $*" >> "$OUT/progress.log"; }
step "gepa-1.5b-reflects start"
/usr/bin/time -v ambiqa compile diva --optimizer gepa --train asqa:train:4 --metric str-em \
  --reflection-lm embedded --gepa-rollouts 8 --gepa-selector all --reflection-minibatch 2 \
  --max-lm-calls 70 --out "$OUT/diva-gepa-1.5b-reflects.json" \
  --lm embedded:qwen2.5-coder-0.5b --index dense:wiki-dense \
  --program-config '{"top_k": 3, "k_per_query": 3, "max_interpretations": 2}' \
  > "$OUT/diva-gepa-1.5b-reflects.log" 2>&1
step "gepa-1.5b-reflects rc=$?"
[ -f "$OUT/diva-gepa-1.5b-reflects.json" ] && ambiqa export "$OUT/diva-gepa-1.5b-reflects.json" \
  --format md --out "$OUT/diva-gepa-1.5b-reflects.prompts.md" >> "$OUT/progress.log" 2>&1
step done
