#!/usr/bin/env bash
# Issue 46: the compile's 12 validation questions, answered again by zero-shot Diva and the
# two clarify candidates that won their runs (clarify=gold:1, clarify=signal:2), so what
# clarify *wrote* can be read -- the compile stores each candidate's answer, not its readings.
# The questions are carved from asqa:train:36 exactly as `ambiqa compile --select-val 12`
# carves them (same seed) into a temporary file (data never enters the repository); every LM
# call is answered from the response cache the compiles filled (no LM time).
#   bash benchmarks/results/compile-v5/val-runs.sh
#   python -m benchmarks.readings benchmarks/results/compile-v5/runs/val-zeroshot \
#     benchmarks/results/compile-v5/runs/val-clarify-gold1 benchmarks/results/compile-v5/runs/val-clarify-signal2
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-v5
VAL=$(mktemp --suffix=.jsonl)
trap 'rm -f "$VAL"' EXIT
python - "$VAL" <<'PY'
import json, sys
from ambiqa.api.plan import load_data
from ambiqa.optimizers.compile import CompileReport, carve_validation
from ambiqa.optimizers.recipes import get_recipe, usable_examples
examples, spec = load_data("asqa:train:36")
usable = usable_examples(examples, get_recipe("diva"), "str-rouge", spec)
_, val = carve_validation(usable, 12, 0, CompileReport(optimizer="none", settings={}))
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for ex in val:
        f.write(json.dumps({k: ex[k] for k in ex.keys()}, default=str) + "\n")
PY
for arm in zeroshot:diva clarify-gold1:$R/diva-clarify-gold.json \
           clarify-signal2:$R/diva-clarify-signal.json; do
  nice ambiqa evaluate "${arm#*:}" --data "jsonl:$VAL" --index wiki-dense \
    --metrics str-em,rouge-l --threads 1 --out "$R/runs/val-${arm%%:*}"
done
