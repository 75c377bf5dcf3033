#!/usr/bin/env bash
# Issue 45, side by side: Haystack's and LlamaIndex's documented plain RAG pipelines beside
# ambiqa's vanilla_rag, on the first N ASQA dev questions, the same corpus (the peers embed it
# with the same MiniLM as ambiqa's dense index), the same default 1.5B behind llama.cpp's
# OpenAI-compatible server (started and stopped by the benchmark), the same output budget.
# Blocks of 5 questions, each answered by every system in turn, the order rotating by block.
# Diva is left out of this run (about 6.6 LM calls a question: n = 30 would take most of a
# session); its standing is read from its own dev rows on the same questions. No D-F1 (reader
# v3 is not on this machine): quality is STR-EM and ROUGE-L. --resume continues a stopped run.
#   bash benchmarks/results/peers/run.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../../.."
N=${1:-30}
echo "$(date -u +%FT%TZ) peers n=$N start" >> benchmarks/results/peers/progress.log
nice python -m benchmarks.peers --serve qwen2.5-coder-1.5b --n "$N" --index dense:wiki-dense \
  --systems haystack,llamaindex,vanilla_rag --resume 2>&1 | tee -a benchmarks/results/peers/run.log
echo "$(date -u +%FT%TZ) peers n=$N done" >> benchmarks/results/peers/progress.log
