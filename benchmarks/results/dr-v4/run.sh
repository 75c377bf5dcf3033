#!/usr/bin/env bash
# Issues 42/46: D-F1 and DR for the ASQA runs made while no reader was on this machine, read
# by the shipped reader (extractive:minilm-asqa-v4) from their stored long answers, no LM call;
# then the paired comparisons the compile and token work need.
#   bash benchmarks/results/dr-v4/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results
D=$R/dr-v4
python -m benchmarks.add_d_f1 $R/loop-guard/runs/on $R/loop-guard/runs/off \
  $R/compile-v5/runs/diva-clarify-signal-guarded $R/compile-v5/runs/diva-clarify-gold-guarded \
  $R/compile-v5/runs/diva-clarify-signal $R/compile-v5/runs/diva-clarify-gold \
  $R/step-replay/runs/brief $R/step-replay/runs/words-100 $R/compile-v4/runs/diva-zeroshot \
  $R/compile-v5/runs/val-zeroshot $R/compile-v5/runs/val-clarify-signal2 \
  $R/compile-v5/runs/val-clarify-gold1 $R/compile-v3/runs/diva-bootstrap-dr-signal \
  $R/compile-v3/runs/diva-labeled-signal
# dev, n = 60: zero-shot Diva (today's code, loop guard on) against the compile-v5 dev arms,
# the step-replay arms and the loop guard off
ambiqa compare $D/loop-guard/runs/on $D/compile-v5/runs/diva-clarify-signal-guarded \
  $D/compile-v5/runs/diva-clarify-gold-guarded $D/step-replay/runs/brief \
  $D/step-replay/runs/words-100 $D/loop-guard/runs/off \
  --out $D/compare-dev --metrics str-em,rouge-l,d-f1,dr
# the compile's own validation questions (12 held-out ASQA *training* questions)
ambiqa compare $D/compile-v5/runs/val-zeroshot $D/compile-v5/runs/val-clarify-signal2 \
  $D/compile-v5/runs/val-clarify-gold1 --out $D/compare-val --metrics str-em,rouge-l,d-f1,dr
# issue 46's second target: the compiled Diva arms against the best compiled vanilla_rag
# (labeled, by DR read by v4), the same 60 dev questions
ambiqa compare benchmarks/results/evidence-rescored-v4/asqa-compiled/vanilla_rag-labeled \
  $D/compile-v5/runs/diva-clarify-signal-guarded $D/compile-v5/runs/diva-clarify-gold-guarded \
  $D/loop-guard/runs/on --out $D/compare-vs-vanilla --metrics str-em,rouge-l,d-f1,dr
# issue 45: the peers' runs (benchmarks/results/peers, n = 30) in D-F1 and DR, with zero-shot
# Diva's dev rows on the same questions (embedded 1.5B, not the peers' server: flagged)
python -m benchmarks.add_d_f1 $R/peers/vanilla_rag $R/peers/haystack-dense \
  $R/peers/llamaindex-dense
ambiqa compare $D/peers/vanilla_rag $D/peers/haystack-dense $D/peers/llamaindex-dense \
  $D/loop-guard/runs/on --out $D/compare-peers --metrics str-em,rouge-l,d-f1,dr
ambiqa compare $D/peers/haystack-dense $D/peers/llamaindex-dense $D/loop-guard/runs/on \
  --out $D/compare-peers-diva --metrics str-em,rouge-l,d-f1,dr
