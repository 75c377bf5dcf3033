"""benchmarks/run_seconds.py: seconds and tokens of two stored runs, paired by question, the
ratio new over old, only over the rows asked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ambiqa.errors import ConfigError
from benchmarks import run_seconds


def _run(path: Path, walls: list[float], *, ids: list[str] | None = None,
         output: int = 100, error_at: int | None = None) -> Path:
    path.mkdir()
    ids = ids or [f"q{i}" for i in range(len(walls))]
    rows = []
    for i, (qid, wall) in enumerate(zip(ids, walls, strict=True)):
        cost = {"lm_calls": 2, "input_tokens": 1000, "computed_tokens": 600,
                "output_tokens": output, "lm_latency_s": wall - 1.0, "wall_s": wall}
        rows.append({"id": qid, "question": f"question {qid}", "wall_s": wall, "cost": cost,
                     "error": "boom" if i == error_at else None})
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                        encoding="utf-8")
    return path


def test_ratio_is_new_over_old_on_shared_questions(tmp_path):
    old = _run(tmp_path / "old", [100.0, 120.0, 80.0, 100.0])
    new = _run(tmp_path / "new", [50.0, 60.0, 40.0, 50.0, 999.0],
               ids=["q0", "q1", "q2", "q3", "extra"], output=50)
    got = run_seconds.compare(old, new)
    assert got["n"] == 4  # the question only the new run holds is left out
    assert got["wall_s"]["ratio"] == pytest.approx(0.5)
    assert got["wall_s"]["old"] == pytest.approx(100.0)
    assert got["tokens"]["new"]["output_tokens"] == pytest.approx(50.0)
    assert got["tokens"]["old"]["cached_tokens"] == pytest.approx(400.0)


def test_rows_narrow_to_the_base_runs_positions_and_errors_are_dropped(tmp_path):
    old = _run(tmp_path / "old", [100.0, 100.0, 200.0, 200.0, 200.0], error_at=2)
    new = _run(tmp_path / "new", [100.0, 100.0, 100.0, 100.0, 100.0])
    got = run_seconds.compare(old, new, rows=(2, 4))
    # answered rows in file order are q0, q1, q3, q4: positions 2..3 are q3 and q4
    assert got["n"] == 2 and got["wall_s"]["ratio"] == pytest.approx(0.5)
    text = run_seconds.render(got, "old", "new", "cmd")
    assert "| wall seconds | 200.0 | 100.0 | 0.50×" in text and "rows 2-3" in text


def test_no_shared_question_is_a_clear_error(tmp_path):
    old = _run(tmp_path / "old", [1.0, 2.0, 3.0])
    new = _run(tmp_path / "new", [1.0], ids=["other"])
    with pytest.raises(ConfigError, match="share no answered question"):
        run_seconds.compare(old, new)
    with pytest.raises(ConfigError, match="no results.jsonl"):
        run_seconds.compare(tmp_path / "missing", new)
