#!/usr/bin/env bash
# Issue 45, target 4: `ambiqa demo` wall time on this 2-core machine, idle (no other job),
# each configuration from an empty ambiqa cache (the GGUF assembled from its PyPI parts, the
# demo index built, no DSPy response cache) -- except colbert-ai's C++ extensions, taken from
# the shared cache (a first run on a new machine compiles them once: ~145 s measured
# 2026-11-23). Run only on an idle machine; one configuration after the other.
#   bash benchmarks/results/demo-timing/run.sh NAME [ambiqa demo flags...]
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/demo-timing
NAME=${1:?name}; shift
TMP=$(mktemp -d)
export AMBIQA_CACHE="$TMP/cache" AMBIQA_INDEX_ROOT="$TMP/indexes"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$HOME/.cache/ambiqa/torch_extensions}"
echo "$(date -u +%FT%TZ) load before: $(cut -d' ' -f1-3 /proc/loadavg)" > "$R/$NAME.log"
set +e
/usr/bin/time -v ambiqa demo --out-dir "$TMP/artifacts" "$@" >> "$R/$NAME.log" 2>&1
rc=$?
set -e
echo "exit $rc; load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$R/$NAME.log"
cp "$TMP/artifacts/demo-vanilla_rag.prompts.md" "$R/$NAME.prompts.md" 2>/dev/null || true
rm -rf "$TMP"
grep -E "Elapsed|Maximum resident|demo finished|compiled in|index demo ready" "$R/$NAME.log"
exit $rc
