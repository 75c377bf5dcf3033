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


def test_variant_is_checked_before_any_model_loads(benchmark_script):
    import pytest

    tp = benchmark_script("throughput")
    assert tp.parse_variant(None) is None
    v = tp.parse_variant('{"diva": {"verify_evidence": "brief", "trim_sentences": 2}}')
    assert v == {"diva": {"verify_evidence": "brief", "trim_sentences": 2}}
    for bad, said in [("{nope", "not JSON"), ('{"diva": {}}', "non-empty settings"),
                      ('{"diva": {"verify_evidence": "loud"}}', "verify_evidence"),
                      ('{"diva": {"no_such": 1}}', "--variant diva"),
                      ('{"nosuchprogram": {"k": 1}}', "--variant nosuchprogram")]:
        with pytest.raises(SystemExit, match=said):
            tp.parse_variant(bad)


def test_the_variant_side_builds_each_program_with_its_settings(benchmark_script):
    from ambiqa.retrieval.base import InMemoryRetriever
    from ambiqa.types import Passage

    tp = benchmark_script("throughput")
    retriever = InMemoryRetriever([Passage("p1", "T", "Some text.")])
    lm = object()  # no model: only the programs are built
    old = tp.Side("old", None, None, budget_off=False, lm=lm)
    new = tp.Side("new", None, None, budget_off=False, lm=lm,
                  overrides={"diva": {"verify_evidence": "brief"}})
    assert old.program("diva", retriever, None).verify_evidence == "sentence"
    diva = new.program("diva", retriever, None)
    assert diva.verify_evidence == "brief"
    assert new.program("vanilla_rag", retriever, None) is not None  # not in the variant


def test_a_variant_run_says_what_old_and_new_are(benchmark_script, tmp_path):
    tp = benchmark_script("throughput")
    rows = _rows()
    rows[0] = {**rows[0], "variant": {"diva": {"verify_evidence": "brief"}}}
    rows_path = tmp_path / "rows.jsonl"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert tp.report(rows_path, tmp_path, {"model": "m", "variant": None}) == 0
    table = (tmp_path / "table.md").read_text()
    assert "old: today's code with each program's default settings; new: the same with " \
           '`{"diva": {"verify_evidence": "brief"}}`' in table
