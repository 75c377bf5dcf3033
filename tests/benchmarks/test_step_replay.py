"""benchmarks/step_replay.py: one changed step's tokens and the answers, paired with the default."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest

from benchmarks import step_replay


def _run(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def _row(qid: str, path: str, votes: list[bool | None], sig: str, out_tokens: int,
         metrics: tuple[float, float], answer: str = "a b c", readings: list[str] | None = None,
         truncated: int = 0) -> dict:
    readings = readings or [f"reading {i}" for i in range(len(votes))]
    return {"id": qid, "question": f"q{qid}?", "error": None,
            "metrics": {"str-em": metrics[0], "rouge-l": metrics[1]},
            "cost": {"by_signature": {sig: {"calls": len(votes), "output_tokens": out_tokens,
                                            "computed_tokens": 100 * len(votes),
                                            "max_output_tokens": out_tokens,
                                            "truncated": truncated}}},
            "prediction": {"answer": answer, "path": path, "verdict": "V" + path,
                           "pseudo_interpretations": readings,
                           "passages": [{"title": "T", "text": f"The answer is gold{qid}."}],
                           "votes": [{"interpretation": r, "supported": v, "evidence": "e"}
                                     for r, v in zip(readings, votes, strict=True)]}}


GOLD = {q: dspy.Example(id=q, question=f"q{q}?", qa_pairs=[
    {"question": "x", "short_answers": [f"gold{q}" if q != "3" else "absent"]}])
    for q in ("1", "2", "3")}


def test_pairs_the_changed_steps_tokens_paths_and_answers(tmp_path, capsys):
    old = "VerifyRetrieval"
    new = "VerifyRetrievalBrief"
    default = _run(tmp_path, "default", [
        _row("1", "rag", [True, True], old, 0, (0.5, 0.3)),
        _row("2", "rag", [True, False], old, 0, (1.0, 0.4)),
        _row("3", "rag", [True], old, 0, (0.0, 0.2))])
    stored = _run(tmp_path, "stored", [
        _row("1", "rag", [True, True], old, 140, (0.5, 0.3), truncated=1),
        _row("2", "rag", [True, False], old, 120, (1.0, 0.4)),
        _row("3", "rag", [True], old, 70, (0.0, 0.2))])
    arm = _run(tmp_path, "arm", [
        _row("1", "rag", [True, None], new, 20, (0.5, 0.3)),
        _row("2", "rag", [True, True], new, 30, (1.0, 0.5), answer="a b c d e"),
        # question 3: no gold answer in its passages, so closed book is right
        _row("3", "closed_book", [False], new, 10, (0.0, 0.1))])
    s = step_replay.summarize(default, arm, stored, GOLD, old, new)
    assert s["paired"] == s["same_readings"] == 3
    assert s["tokens"]["default"]["output_per_call"] == pytest.approx(330 / 5)
    assert s["tokens"]["arm"]["output_per_call"] == pytest.approx(60 / 5)
    assert s["tokens"]["default"]["truncated"] == 1
    assert s["step_output_per_question"]["diff"] == pytest.approx(60 / 3 - 330 / 3)
    assert s["abstained"] == {"default": 0, "arm": 1}
    assert (s["votes_compared"], s["votes_agree"]) == (4, 2)
    assert (s["verdict_agree"], s["path_agree"]) == (2, 2)
    assert s["path_accuracy"]["default"] == pytest.approx(2 / 3)
    assert s["path_accuracy"]["arm"] == pytest.approx(1.0)
    assert s["quality"]["rouge-l"]["diff"] == pytest.approx((0.0 + 0.1 - 0.1) / 3)
    assert s["median_words"] == {"default": 3, "arm": 3}
    assert [c["id"] for c in s["path_changed"]] == ["3"]
    assert step_replay.main([str(default), str(arm), "--signature", f"{old}:{new}",
                             "--stored", str(stored), "--data", "demo:dev"]) == 0
    assert "Questions whose path changed" in capsys.readouterr().out


def test_readings_that_differ_are_left_out_of_the_step_comparison(tmp_path):
    default = _run(tmp_path, "d", [_row("1", "rag", [True], "W", 50, (1, 1), readings=["a"])])
    arm = _run(tmp_path, "a", [_row("1", "rag", [True], "W", 20, (1, 1), readings=["b"])])
    s = step_replay.summarize(default, arm, None, GOLD, "W", "W")
    assert s["paired"] == 1 and s["same_readings"] == 0
    assert s["tokens"]["arm"]["calls"] == 0
    with pytest.raises(SystemExit, match="no results.jsonl"):
        step_replay.main([str(tmp_path / "none"), str(arm), "--signature", "W",
                          "--data", "demo:dev"])
