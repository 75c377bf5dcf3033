"""benchmarks/throughput.py's report: ``--since`` keeps whole blocks measured after a time."""

from __future__ import annotations

import json


def _block(program: str, block: int, side: str, wall: float, at: str) -> list[dict]:
    """One side of one block of one question: its question row and its block row."""
    q = {"kind": "question", "program": program, "block": block, "side": side,
         "qid": f"q{block}", "latency_s": wall, "answer": "a", "str_em": 1.0,
         "rouge_lsum": 0.5, "trace": {"lm_calls": 2, "input_tokens": 100,
                                      "computed_tokens": 80, "output_tokens": 10}}
    b = {"kind": "block", "program": program, "block": block, "side": side, "wall_s": wall,
         "n": 1, "at": at}
    return [q, b]


def _rows() -> list[dict]:
    return [{"kind": "meta", "model": "m", "threads": 2, "retriever": "r", "baseline": "b",
             "slots": 2, "block": 1},
            # block 0: old side on a loaded machine the day before, new side the next day
            *_block("vanilla_rag", 0, "old", 400.0, "2026-11-23T03:38:01"),
            *_block("vanilla_rag", 0, "new", 100.0, "2026-11-24T14:00:00"),
            *_block("vanilla_rag", 1, "new", 50.0, "2026-11-24T14:09:32"),
            *_block("vanilla_rag", 1, "old", 75.0, "2026-11-24T14:11:41")]


def test_since_drops_a_block_with_any_side_before_it_and_its_questions(benchmark_script):
    tp = benchmark_script("throughput")
    kept = tp.blocks_since(_rows(), "2026-11-24")
    assert {(r["block"], r["side"]) for r in kept if r.get("kind") == "block"} == {
        (1, "old"), (1, "new")}
    assert {r["qid"] for r in kept if r.get("kind") == "question"} == {"q1"}
    assert any(r.get("kind") == "meta" for r in kept)
    (entry,) = tp.summarize(kept)
    assert entry["blocks"] == 1 and abs(entry["ratio"] - 1.5) < 1e-9


def test_report_writes_the_full_table_and_the_since_table(benchmark_script, tmp_path):
    tp = benchmark_script("throughput")
    rows_path = tmp_path / "rows.jsonl"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in _rows()), encoding="utf-8")
    assert tp.report(rows_path, tmp_path, {"model": "m"}, "2026-11-24") == 0
    full = json.loads((tmp_path / "summary.json").read_text())
    late = json.loads((tmp_path / "summary-since-2026-11-24.json").read_text())
    assert full[0]["blocks"] == 2 and late[0]["blocks"] == 1
    assert (tmp_path / "table-since-2026-11-24.md").read_text().startswith(
        "Only the blocks measured at or after 2026-11-24.")


def test_old_side_keeps_todays_signature_when_its_fields_changed(benchmark_script):
    """An old prompt whose inputs the program no longer passes is not swapped in."""
    import dspy

    tp = benchmark_script("throughput")

    class Check(dspy.Signature):
        """Today's check."""
        question: str = dspy.InputField()
        answer: str = dspy.InputField()
        valid: bool = dspy.OutputField()

    class OldCheck(dspy.Signature):
        """The old check, with an input today's program does not pass."""
        question: str = dspy.InputField()
        interpretation: str = dspy.InputField()
        answer: str = dspy.InputField()
        valid: bool = dspy.OutputField()

    class OldReordered(dspy.Signature):
        """The old check in another field order: same step, swapped in."""
        answer: str = dspy.InputField()
        question: str = dspy.InputField()
        valid: bool = dspy.OutputField()

    class Program(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.check = dspy.Predict(Check)

    prog = Program()
    assert tp.use_signatures(prog, {"Check": OldCheck}) == 0
    assert prog.check.signature is Check
    assert tp.use_signatures(prog, {"Check": OldReordered}) == 1
    assert prog.check.signature is OldReordered
