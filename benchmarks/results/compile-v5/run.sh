#!/usr/bin/env bash
# Issue 46: the first compile of Diva on the default 1.5B that chooses. `labeled` gives every
# predictor k = 2 gold demos (no LM call); then the zero-shot program, the input (= zero-shot
# here), the labeled program and six demo plans on top of it are each scored on 12 training
# questions held out before the teleprompter runs (never dev), and the best by the objective
# ships -- zero-shot unless something beats it. Objective: str-rouge, the mean of STR-EM and
# ROUGE-L (a reader-free stand-in for DR: no D-F1 reader is on this machine, issue 42).
# The plans: clarify and the writer without demos on the labeled upstream (what the labeled
# typing, pseudo-interpretation and verifier demos do alone); and on the zero-shot upstream
# (typing, pseudo-interpretations, verifier and closed book without demos) with a zero-shot
# clarify, the writer with one gold demo and with its two (what the writer's demos do alone,
# and whether the answer's length follows them). Three more plans (the writer alone without
# demos / with one gold demo on the labeled upstream, clarify's gold demos on the zero-shot
# upstream) were dropped after the first candidate: at ~2 LM calls a minute they would not
# have finished within the session.
# Writer-only plans pay one writer call per question: every upstream call is answered from
# the compile's memo. A killed run restarts from DSPy's response cache (same requests, same
# replies), so rerunning this script is its --resume.
# The first run (diva-labeled-choice) drew the gold writer demos at random; the second
# (diva-labeled-choice-form, after `pick_gold`) takes those in the references' typical form.
#   bash benchmarks/results/compile-v5/run.sh [NAME]
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-v5
NAME=${1:-diva-labeled-choice}
UP0="typing=none,pseudo_interpretations=none,verify=none,closed_book.answer=none"
PLANS="clarify=none,writer=none;$UP0,clarify=none,writer=gold:1;$UP0,clarify=none"
echo "$(date -u +%FT%TZ) compile $NAME start" >> "$R/progress.log"
nice ambiqa compile diva --train asqa:train:36 --select-val 12 --optimizer labeled --k 2 \
  --metric str-rouge --candidates "$PLANS" --index wiki-dense --threads 2 \
  --out "$R/$NAME.json" 2>&1 | tee -a "$R/compile-$NAME.log"
echo "$(date -u +%FT%TZ) compile $NAME done" >> "$R/progress.log"
