"""The README's main job end to end through the CLI, each step in a new process:
``ambiqa demo`` (index → compile → export → load → ask), then ``ambiqa export`` and
``ambiqa ask --artifact`` reading what the demo wrote. Uses the fast 0.5B model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration
SMALL = "embedded:qwen2.5-coder-0.5b"


def _run(args, env, timeout=900):
    res = subprocess.run([sys.executable, "-m", "ambiqa.cli", *args], capture_output=True,
                         text=True, env=env, timeout=timeout)
    assert res.returncode == 0, (
        f"{args}\nSTDOUT:\n{res.stdout[-3000:]}\nSTDERR:\n{res.stderr[-3000:]}")
    return res.stdout


def test_demo_then_export_then_ask_in_new_processes(tmp_path):
    env = {**os.environ, "AMBIQA_INDEX_ROOT": str(tmp_path / "indexes"),
           "AMBIQA_CACHE": os.environ["AMBIQA_CACHE"], "COLUMNS": "120"}
    out = _run(["demo", "--lm", SMALL, "--out-dir", str(tmp_path / "artifacts"),
                "--n-dev", "1", "--max-tokens", "384"], env)
    assert "demo finished" in out and "Answer" in out
    artifact = tmp_path / "artifacts" / "demo-vanilla_rag.json"
    doc = json.loads(artifact.read_text())
    m = doc["manifest"]
    # the demo's defaults: gold demos, chosen against zero-shot by a reader-free objective
    assert m["program"] == "vanilla_rag" and m["optimizer"]["name"] == "labeled"
    assert m["metric"] == "str-rouge" and m["lm"].endswith("0.5b")
    assert m["retriever"]["kind"] == "colbert" and m["retriever"]["index"] == "demo"
    selection = m["optimizer"]["selection"]  # chosen on a held-out demo training question
    assert [c["label"] for c in selection["candidates"]] == ["zero-shot", "input", "labeled"]
    assert selection["shipped"] in ("zero-shot", "labeled") and selection["n_val"] == 1
    assert (tmp_path / "artifacts" / "demo-vanilla_rag.prompts.md").stat().st_size > 500

    exported = _run(["export", str(artifact), "--format", "json"], env)
    prompts = json.loads(exported)["prompts"]
    assert {p["signature"] for p in prompts} == {"ClarifyFromPassages", "WriteLongAnswer"}

    asked = _run(["ask", "Who won the World Cup in 2019?", "--artifact",
                  str(artifact), "--lm", SMALL, "--json", "--max-tokens", "384"], env)
    pred = json.loads(asked[asked.index("{"):])
    assert pred["answer"].strip()
    assert pred["trace"]["retriever_calls"] == 1 and pred["trace"]["lm_calls"] >= 2
    assert all(p["id"].startswith("demo-") for p in pred["passages"])
