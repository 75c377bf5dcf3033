"""benchmarks/optimize.py end to end with the fake endpoint and tiny sizes; resumable."""

from __future__ import annotations

import json

import pytest


def test_optimize_benchmark_runs_and_resumes(tmp_path, shared_data):
    from benchmarks import optimize

    argv = ["--lm", "fake", "--retriever", "bm25", "--programs", "vanilla_rag,resp",
            "--teleprompters", "none,labeled", "--n-train", "2", "--n-dev", "1",
            "--eor-n-train", "3", "--eor-n-dev", "2", "--eor-trials", "60",
            "--out-dir", str(tmp_path)]
    try:
        assert optimize.main(argv) == 0
    except Exception as exc:  # no BM25 index and no corpus to build one
        pytest.skip(f"benchmark retriever unavailable: {exc}")
    rows = [json.loads(ln) for ln in (tmp_path / "optimize-fake.jsonl").read_text().splitlines()]
    pairs = {(r["program"], r["teleprompter"]) for r in rows if r["kind"] == "teleprompter"}
    assert pairs == {("vanilla_rag", "none"), ("vanilla_rag", "labeled"), ("resp", "none"),
                     ("resp", "labeled")}
    resp_labeled = next(r for r in rows if r.get("program") == "resp"
                        and r.get("teleprompter") == "labeled")
    assert resp_labeled["demos"]["generate"] == 2 and resp_labeled["reader"] is None
    eor = next(r for r in rows if r["kind"] == "eor")
    assert eor["trials"] == 60 and set(eor) >= {"train", "webq:dev", "nq:oracle"}
    table = (tmp_path / "optimize-fake.md").read_text()
    assert "| vanilla_rag | labeled | d-f1 (lm-reader:openai/fake) |" in table
    assert "EoR voter" in table and (tmp_path / "eor-weights-fake.png").is_file()
    # rerun: every pair and every EoR cache is reused; only the EoR tuning row is redone
    n_caches = len(list(tmp_path.glob("eor-*-fake.json")))
    assert optimize.main(argv) == 0
    rows2 = (tmp_path / "optimize-fake.jsonl").read_text().splitlines()
    assert len(rows2) == len(rows) + 1
    assert len(list(tmp_path.glob("eor-*-fake.json"))) == n_caches == 3
