#!/usr/bin/env bash
# Issue 46, third Diva run: the writer's demos from the program's *own* answers. No
# teleprompter (`--optimizer none`: the compiled program is zero-shot Diva); the candidates
# give the writer k = 1 or 2 demos chosen against the writer's signal (a long answer that
# states every distinct reading it was given, at a length near the references') from one
# traced pass of zero-shot Diva over the 24 training questions -- the answers the 1.5B itself
# wrote, not the references' paragraphs it copied badly in the first two runs. The same 12
# held-out training questions, seed and objective (str-rouge) as run.sh, so zero-shot's 79
# calls replay from the response cache and a writer-only candidate pays 12 LM calls.
# The traced pass answers two training questions at once (--threads 2). Rerunning replays.
#   bash benchmarks/results/compile-v5/run-signal.sh [NAME] [PLANS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/compile-v5
NAME=${1:-diva-writer-signal}
PLANS=${2:-"writer=signal:1;writer=signal:2"}
echo "$(date -u +%FT%TZ) compile $NAME start" >> "$R/progress.log"
nice ambiqa compile diva --train asqa:train:36 --select-val 12 --optimizer none --k 2 \
  --metric str-rouge --candidates "$PLANS" --index wiki-dense --threads 2 \
  --out "$R/$NAME.json" 2>&1 | tee -a "$R/compile-$NAME.log"
echo "$(date -u +%FT%TZ) compile $NAME done" >> "$R/progress.log"
