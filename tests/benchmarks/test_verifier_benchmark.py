"""benchmarks/verifier.py --from-run: silver-label scoring of the votes a Diva run recorded."""

from __future__ import annotations

import json

import pytest

from ambiqa.data import load_dataset
from ambiqa.testing import HashEncoder


def _row(ex_id: str, votes: list[tuple[str, bool | None]], passage: str, path: str,
         verdict: str) -> dict:
    return {"id": ex_id, "error": None, "metrics": {}, "cost": {},
            "prediction": {"answer": "x", "ambiguity_type": "Temporal", "path": path,
                           "verdict": verdict,
                           "passages": [{"id": "p1", "title": "t", "text": passage}],
                           "votes": [{"interpretation": q, "supported": s, "evidence": ""}
                                     for q, s in votes]}}


def test_from_run_scores_recorded_votes_against_silver_labels(tmp_path, shared_data,
                                                              benchmark_script):
    vb = benchmark_script("verifier")
    iphone, final = load_dataset("asqa:dev:2")
    run = tmp_path / "diva"
    run.mkdir()
    (run / "run.json").write_text(json.dumps(
        {"program": "diva", "data": "asqa:dev:2", "metrics": ["str-em"]}))
    rows = [
        # the kept passage holds "June 29, 2007": the release vote is a silver yes
        _row(iphone.id, [(iphone.qa_pairs[0]["question"], True),
                         (iphone.qa_pairs[1]["question"], None)],
             "The first iPhone was released on June 29, 2007.", "rag", "Useful"),
        # nothing of the gold answers in the passage: a "no" is right, the path is closed book
        _row(final.id, [(final.qa_pairs[1]["question"], False)],
             "A passage about something else entirely.", "closed_book", "Useless"),
        {"id": "gone", "error": "TimeoutError", "prediction": None, "metrics": {}, "cost": {}},
    ]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got, meta = vb.rows_from_run(run, HashEncoder())
    assert meta["failed"] == 1 and len(got) == 2
    assert got[0]["silver"] == [True, False] and got[0]["silver_question"] is True
    assert got[1]["silver"] == [False] and got[1]["silver_question"] is False
    stats = vb.vote_stats(got, "run")
    assert stats["precision"] == 1.0 and stats["recall"] == 1.0
    assert stats["abstain_rate"] == pytest.approx(1 / 3)
    assert stats["rag_share"] == 0.5 and stats["path_accuracy"] == 1.0
    md = vb.render_run(got, meta, "python benchmarks/verifier.py --from-run x")
    assert "Verdicts: Useful 1, Useless 1" in md and "±" not in md


def test_from_run_refuses_a_run_of_another_program(tmp_path, shared_data, benchmark_script):
    vb = benchmark_script("verifier")
    (tmp_path / "run.json").write_text(json.dumps(
        {"program": "vanilla_rag", "data": "asqa:dev:2", "metrics": ["str-em"]}))
    (tmp_path / "results.jsonl").write_text("")
    with pytest.raises(SystemExit, match="needs diva"):
        vb.rows_from_run(tmp_path, HashEncoder())
