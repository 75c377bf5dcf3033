"""benchmarks/optimize.py end to end with the fake endpoint and tiny sizes; resumable."""

from __future__ import annotations

import json


def test_optimize_benchmark_runs_and_resumes(tmp_path, shared_data):
    from benchmarks import optimize

    argv = ["--lm", "fake", "--retriever", "bm25", "--programs", "vanilla_rag,resp",
            "--teleprompters", "none,labeled", "--n-train", "2", "--n-dev", "1",
            "--eor-n-train", "3", "--eor-n-dev", "2", "--eor-trials", "60",
            "--out-dir", str(tmp_path)]
    # shared_data guarantees the corpus, from which the BM25 index is opened or built; any
    # exception from here on is a failure, not a reason to skip
    assert optimize.main(argv) == 0
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
    assert "| vanilla_rag | labeled | d-f1 (extractive:minilm-asqa-v4) |" in table
    assert "EoR voter" in table and (tmp_path / "eor-weights-fake.png").is_file()
    # rerun: every pair and every EoR cache is reused; only the EoR tuning row is redone
    n_caches = len(list(tmp_path.glob("eor-*-fake.json")))
    assert optimize.main(argv) == 0
    rows2 = (tmp_path / "optimize-fake.jsonl").read_text().splitlines()
    assert len(rows2) == len(rows) + 1
    assert len(list(tmp_path.glob("eor-*-fake.json"))) == n_caches == 3


# ---- benchmarks/methods_cost.py: observed LM rounds against the stated minimum ---------------
def test_lm_rounds_is_the_longest_chain_of_dependent_calls():
    from benchmarks.methods_cost import lm_rounds

    assert lm_rounds([]) == 0
    assert lm_rounds([(0.0, 1.0)] * 5) == 1                          # five calls at once
    assert lm_rounds([(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]) == 3       # one after another
    # relax -> three overlapping reads -> write: 3 rounds, whatever the reads' jitter
    assert lm_rounds([(0, 1), (1.01, 2), (1.02, 2.2), (1.0, 1.9), (2.2, 3)]) == 3
    # the same reads run one at a time: every read is a round
    assert lm_rounds([(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]) == 5


def test_every_program_states_its_minimal_lm_rounds():
    from ambiqa.programs.registry import PROGRAMS, program_class

    for name in PROGRAMS:
        n = program_class(name).__dict__.get("min_lm_rounds")
        assert isinstance(n, int) and n >= 1, name


def test_methods_cost_rounds_can_exceed_the_minimum(tmp_path, shared_data, monkeypatch):
    """With the fake endpoint, VerDICt's per-passage reads share one round when they run in
    parallel (3 rounds: relax, reads, long answer) and take one round each when the
    program is limited to one worker -- the measure fails a program that serializes."""
    from benchmarks import methods_cost

    monkeypatch.setenv("AMBIQA_PARALLEL", "8")  # main() sets it; restored after the test
    rows = {}
    for parallel in (8, 1):
        out = tmp_path / f"p{parallel}.jsonl"
        assert methods_cost.main([
            "--lm", "fake", "--delay", "0.2", "--n", "1", "--programs", "verdict",
            "--retriever", "bm25", "--parallel", str(parallel), "--program-config",
            'verdict={"n_passages": 4}', "--out", str(out)]) == 0
        (row,) = [json.loads(x) for x in out.read_text().splitlines()]
        rows[parallel] = row
        table = out.with_suffix(".md").read_text()
        assert "| min rounds |" in table and "wall/crit" not in table
    fast, slow = rows[8], rows[1]
    assert not fast["error"] and fast["min_lm_rounds"] == 3
    reads = fast["calls_by_module"].get("InterpretFromPassage", 0)
    assert reads >= 2
    # parallel reads share a round (a parse retry elsewhere may add one of its own)
    assert 3 <= fast["lm_rounds"] <= fast["lm_calls"] - reads + 1
    assert slow["lm_rounds"] >= fast["lm_rounds"] + reads - 1
    # a question cannot finish faster than its chain of LM calls; how much slower it is
    # (encoder, retrieval, machine load) is what the benchmark reports, not a pass/fail here
    assert fast["wall_over_rounds_delay"] > 0.9
    assert slow["wall_over_rounds_delay"] > 0.9
