"""benchmarks/reader_rebuild.py: does a rebuilt reader re-score stored rows to the same D-F1?"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace


class FirstWordReader:
    """Answers every question with the context's first word: enough to make D-F1 vary."""

    name = "extractive:fake"

    def answer(self, question: str, context: str) -> str:
        return context.split()[0] if context.split() else ""


def _run(path: Path, reader: str, rows: list[dict]) -> None:
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"program": path.name, "reader": reader}))
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_rows_scored_by_the_same_reader_are_checked_and_a_changed_score_is_found(
        tmp_path, benchmark_script) -> None:
    rb = benchmark_script("reader_rebuild")
    dev = {"q1": SimpleNamespace(qa_pairs=[{"question": "a?", "short_answers": ["Paris"]}]),
           "q2": SimpleNamespace(qa_pairs=[{"question": "b?", "short_answers": ["Rome"]}])}
    rows = [{"id": "q1", "prediction": {"answer": "Paris is big."}, "metrics": {"d-f1": 1.0}},
            {"id": "q2", "prediction": {"answer": "Paris again."}, "metrics": {"d-f1": 0.0}}]
    _run(tmp_path / "asqa" / "same", "extractive:fake", rows)
    changed = [rows[0], {**rows[1], "metrics": {"d-f1": 0.5}}]  # scored by other weights
    _run(tmp_path / "asqa" / "drifted", "extractive:fake", changed)
    _run(tmp_path / "asqa" / "other", "extractive:minilm-asqa", rows)  # another reader: skipped

    result = rb.check(FirstWordReader(), [tmp_path / "asqa"], dev)
    by_run = {Path(r["run"]).name: r for r in result["runs"]}
    assert set(by_run) == {"same", "drifted"}
    assert by_run["same"] == {"run": by_run["same"]["run"], "rows": 2, "identical": 2,
                              "max_abs_diff": 0.0}
    assert by_run["drifted"]["identical"] == 1 and by_run["drifted"]["max_abs_diff"] == 0.5
    assert (result["rows"], result["identical"]) == (4, 3)
