"""benchmarks/grounding.py: VerDICt's grounding metrics scored on stored rows, resumably."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest

from ambiqa.testing import scripted_lm

EXAMPLE = dspy.Example(
    question="Who made Jaws?",
    qa_pairs=[{"question": "Who directed the film Jaws?", "short_answers": ["Steven Spielberg"]},
              {"question": "Who wrote the Jaws novel?", "short_answers": ["Peter Benchley"]}],
    gold_passages=[{"id": "g1", "title": "Jaws", "text": "Jaws was directed by Spielberg."},
                   {"id": "g2", "title": "Jaws", "text": "It adapts the novel by Benchley."}],
).with_inputs("question")
PASSAGES = [{"id": "p1", "title": "Jaws", "text": "Jaws was directed by Steven Spielberg."},
            {"id": "p2", "title": "Jaws", "text": "Jaws was released in 1975."}]


def _supported(inp: dict) -> dict:
    """The scripted judge: a passage supports a question when both say 'directed' or 'novel'."""
    q, ps = inp["interpretation"].lower(), inp["passages"].lower()
    return {"supported": any(w in q and w in ps for w in ("directed", "novel"))}


def _write(run_dir: Path, rows: list[dict]) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_grounding_is_scored_from_stored_rows_once_and_failures_score_zero(
        tmp_path, use_lm, benchmark_script) -> None:
    gb = benchmark_script("grounding")
    cited = {"interpretations": [{"question": "Who directed Jaws?", "answer": "Spielberg",
                                  "passages": ["p1"]}], "passages": PASSAGES, "answer": "..."}
    uncited = {"interpretations": [{"question": "When was Jaws released?", "answer": "1975",
                                    "passages": ["p2"]}], "passages": PASSAGES, "answer": "..."}
    _write(tmp_path / "asqa" / "verdict", [{"id": "q1", "error": None, "prediction": cited},
                                           {"id": "q2", "error": "timeout", "prediction": None}])
    _write(tmp_path / "asqa" / "vanilla_rag", [{"id": "q1", "error": None,
                                                "prediction": uncited}])
    examples = {"q1": EXAMPLE, "q2": EXAMPLE}
    lm = use_lm(scripted_lm({"VerifyInterpretation": _supported}))
    out = tmp_path / "grounding"
    logs: list[str] = []

    rows = {r["id"]: r for r in gb.score_run("asqa/verdict", examples, out, root=tmp_path,
                                              log=logs.append)}
    # q1: its one interpretation is supported by p1 -> G-Precision 1. The grounded set: it,
    # plus both gold pairs (grounded in the gold passages; "the film" makes the "directed" one
    # a different question); p1 recalls the generated and the "directed" gold one, not the
    # "novel" one -> G-Recall 2/3, G-F1 = 2 * 1 * 2/3 / (1 + 2/3) = 0.8
    assert rows["q1"]["metrics"] == pytest.approx(
        {"g-precision": 1.0, "g-recall": 2 / 3, "g-f1": 0.8})
    assert rows["q1"]["judge_calls"] > 0
    assert rows["q2"]["metrics"] == {"g-precision": 0.0, "g-recall": 0.0, "g-f1": 0.0}
    calls = lm.engine.count("VerifyInterpretation")
    again = gb.score_run("asqa/verdict", examples, out, root=tmp_path, log=logs.append)
    assert len(again) == 2 and lm.engine.count("VerifyInterpretation") == calls  # resumed

    base = gb.score_run("asqa/vanilla_rag", examples, out, root=tmp_path, log=logs.append)
    assert any("1 of the 2 questions have no row yet" in m for m in logs)
    assert base[0]["metrics"]["g-precision"] == 0.0  # "released" is not judged supported
    result = gb.summarize({"asqa/verdict": again, "asqa/vanilla_rag": base}, "lm-judge:x", 2)
    assert result["runs"]["asqa/verdict"]["g-f1"]["n"] == 2
    (pair,) = [p for p in result["paired"] if p["metric"] == "g-precision"]
    assert pair["n_shared"] == 1 and pair["diff"] == pytest.approx(1.0)
    text = gb.render(result, "python benchmarks/grounding.py")
    assert "| asqa/verdict | 2 |" in text and "stand-in" in text


def test_grounding_refuses_a_run_that_is_not_stored(tmp_path, benchmark_script, capsys) -> None:
    gb = benchmark_script("grounding")
    assert gb.main(["--runs", "asqa/nope", "--root", str(tmp_path), "--report-only"]) == 2
    assert "no stored ASQA run" in capsys.readouterr().err
