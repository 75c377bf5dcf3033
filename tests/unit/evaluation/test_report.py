"""Run reports: summary.json (additive), report.md, plots, EoR consistency, `ambiqa report`."""

from __future__ import annotations

import json
import shutil

import dspy
import pytest

from ambiqa.cli import EXIT_USER_ERROR, main
from ambiqa.evaluation.reports.report import load_run, member_consistency, write_run_report


def _row(i, member_answers, failed=None, em=0.0):
    return {"id": f"q{i}", "question": f"question {i}", "error": None,
            "prediction": {"answer": "", "member_answers": member_answers,
                           "failed_members": failed or {}},
            "metrics": {"em": em, "f1": em},
            "cost": {"lm_calls": 3, "input_tokens": 300, "output_tokens": 9,
                     "retriever_calls": 2, "wall_s": 1.5, "critical_path_s": 1.0,
                     "events": []},
            "wall_s": 1.5}


# Wiki right on q0, q1; BM25 right on q2; ReFree right everywhere (BM25 failed on q3)
EOR_ROWS = [
    _row(0, {"Wiki@10": "a", "BM25@5": "x", "ReFree": "a"}, em=1.0),
    _row(1, {"Wiki@10": "b", "BM25@5": "x", "ReFree": "The B"}, em=1.0),
    _row(2, {"Wiki@10": "x", "BM25@5": "c", "ReFree": "c"}, em=1.0),
    _row(3, {"Wiki@10": "x", "ReFree": "d"}, failed={"BM25@5": "empty answer"}, em=1.0),
]
GOLDS = {"q0": ["a"], "q1": ["b"], "q2": ["c"], "q3": ["d", "D."]}


def test_member_consistency_hand_computed():
    cons = member_consistency(EOR_ROWS, GOLDS)
    assert cons["systems"] == ["Wiki@10", "BM25@5", "ReFree"] and cons["n"] == 4
    rwr = cons["rwr"]
    # RWR(i, j) = #(i right, j wrong) / #(j wrong)
    assert rwr["Wiki@10"]["BM25@5"] == pytest.approx(2 / 3)  # BM25 wrong on q0,q1,q3
    assert rwr["BM25@5"]["Wiki@10"] == pytest.approx(1 / 2)  # Wiki wrong on q2,q3
    assert rwr["ReFree"]["Wiki@10"] == 1.0 and rwr["Wiki@10"]["ReFree"] == 0.0
    assert cons["mrwr"] == pytest.approx({"Wiki@10": 1 / 3, "BM25@5": 1 / 4, "ReFree": 1.0})
    assert cons["mrlr"] == pytest.approx({"Wiki@10": 3 / 4, "BM25@5": 5 / 6, "ReFree": 0.0})
    assert cons["accuracy"] == pytest.approx({"Wiki@10": .5, "BM25@5": .25, "ReFree": 1.0})
    assert member_consistency(EOR_ROWS[:1], {}) is None  # no golds: nothing to say


def test_member_consistency_can_add_the_voted_answer_as_a_system():
    rows = [dict(r, prediction={**r["prediction"], "answer": ans})
            for r, ans in zip(EOR_ROWS, ["a", "x", "c", "d"], strict=True)]
    cons = member_consistency(rows, GOLDS, voted="EoR")
    assert cons["systems"] == ["Wiki@10", "BM25@5", "ReFree", "EoR"]
    assert cons["accuracy"]["EoR"] == pytest.approx(0.75)
    # EoR is wrong only on q1, where Wiki@10 and ReFree are right and BM25@5 is wrong
    assert cons["rwr"]["Wiki@10"]["EoR"] == 1.0 and cons["rwr"]["BM25@5"]["EoR"] == 0.0
    # Wiki@10 is wrong on q2 and q3, EoR right on both
    assert cons["rwr"]["EoR"]["Wiki@10"] == 1.0
    # the members' own accuracies do not move
    assert cons["accuracy"]["BM25@5"] == pytest.approx(.25)


def _write_run(d, rows, spec):
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps(spec))
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_eor_report_has_rwr_heatmap_and_tables(tmp_path):
    run = tmp_path / "eor"
    _write_run(run, EOR_ROWS, {"program": "eor", "data": "toy:dev:4", "metrics": ["em", "f1"],
                               "reader": None, "lm": "scripted"})
    before = (run / "results.jsonl").read_bytes(), (run / "run.json").read_bytes()
    examples = [dspy.Example(id=k, question=k, answers=v) for k, v in GOLDS.items()]
    summary = write_run_report(run, rows=None, spec=None, examples=examples)
    assert ((run / "results.jsonl").read_bytes(), (run / "run.json").read_bytes()) == before
    assert summary["consistency"]["mrwr"]["ReFree"] == 1.0
    md = (run / "report.md").read_text()
    assert "| ReFree | 1.000 | 1.000 | 0.000 |" in md
    assert "![RWR heatmap](plots/rwr.png)" in md
    assert (run / "plots" / "rwr.png").read_bytes()[:4] == b"\x89PNG"
    assert (run / "plots" / "metrics.png").read_bytes()[:4] == b"\x89PNG"
    data = json.loads((run / "summary.json").read_text())
    assert data["n"] == 4 and data["cost"]["lm_calls"] == 3.0
    assert data["cost_total"]["lm_calls"] == 12.0


def test_report_without_golds_notes_it_instead_of_failing(tmp_path):
    run = tmp_path / "eor"
    _write_run(run, EOR_ROWS, {"program": "eor", "data": "nosuchset:dev:4", "metrics": ["em"],
                               "reader": None, "lm": None})
    summary = write_run_report(run)
    assert "consistency" not in summary
    assert "no per-member consistency: gold answers unavailable" in (
        run / "report.md").read_text()


def test_report_cli_renders_a_lead_style_run_and_refuses_non_runs(tmp_path, capsys):
    rows = [{"id": "a1", "question": "q?", "prediction": {"answer": "x", "interpretations": [],
                                                          "passages": []},
             "error": None, "cost": {"lm_calls": 1, "input_tokens": 193, "output_tokens": 21,
                                     "retriever_calls": 0, "wall_s": 3.85,
                                     "critical_path_s": 3.84, "events": []},
             "wall_s": 3.851, "metrics": {"str-em": 0.0, "rouge-l": 0.18, "d-f1": 0.25,
                                          "dr": 0.21},
             "scoring_cost": {"lm_calls": 8, "input_tokens": 1014, "output_tokens": 44}},
            {"id": "a2", "question": "q2?", "prediction": None, "error": "RuntimeError: x",
             "metrics": {}, "cost": {"lm_calls": 0}, "wall_s": 0.1}]
    run = tmp_path / "closed_book"
    _write_run(run, rows, {"program": "closed_book", "data": "asqa:dev:2",
                           "metrics": ["str-em", "rouge-l", "d-f1", "dr"],
                           "reader": "lm-reader:embedded/qwen2.5-coder-0.5b",
                           "lm": "embedded:qwen2.5-coder-0.5b"})
    assert main(["report", str(run)]) == 0
    md = (run / "report.md").read_text()
    assert "- D-F1 reader: `lm-reader:embedded/qwen2.5-coder-0.5b`" in md
    # a2 failed: 0 in the headline (0.18 / 2); the excluding-failures value beside it
    assert "| rouge-l | 0.090 | [–] | 2 | 1 | 0.180 | 1 |" in md  # no interval under n = 3
    assert "| a2 | RuntimeError: x |" in md
    assert "| scoring LM calls (reader/judge, not the program's) | 8.0 | |" in md
    capsys.readouterr()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == EXIT_USER_ERROR
    assert "not a run directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == EXIT_USER_ERROR


def test_report_prints_asqa_dr_from_results_with_failed_rows_as_zero(tmp_path, capsys):
    """Done-when of issue 11: DR from results.jsonl by the ASQA definition, failures = 0."""
    def row(i, d, r):
        # "dr" holds a stale per-question value as older versions wrote; it must be ignored
        return {"id": i, "question": i, "error": None, "prediction": {"answer": "x"},
                "metrics": {"d-f1": d, "rouge-l": r, "dr": 0.99}, "cost": {"lm_calls": 1}}

    rows = [row("a", 0.5, 0.4), row("b", 1.0, 0.2), row("c", 0.0, 0.3),
            {"id": "d", "question": "d", "error": "Timeout: no result after 5 s",
             "prediction": None, "metrics": {}, "cost": {"lm_calls": 2}}]
    run = tmp_path / "run"
    _write_run(run, rows, {"program": "vanilla_rag", "data": "asqa:dev:4",
                           "metrics": ["d-f1", "rouge-l", "dr"], "reader": "fake",
                           "lm": "scripted"})
    capsys.readouterr()
    assert main(["report", str(run), "--no-plots"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    # mean D-F1 = (0.5 + 1 + 0 + 0) / 4 = 0.375; mean ROUGE-L = (0.4 + 0.2 + 0.3 + 0) / 4
    # = 0.225; DR = sqrt(0.375 * 0.225) = 0.2905. Without the failed row: D-F1 0.5,
    # ROUGE-L 0.3, DR sqrt(0.15) = 0.3873. (The mean of per-question roots would be 0.298.)
    assert "dr 0.2905" in out and "n=4 failed=1" in out
    assert "excluding failures: 0.3873 on 3" in out
    assert "d-f1 0.3750" in out and "rouge-l 0.2250" in out
    summary = json.loads((run / "summary.json").read_text())
    dr = summary["metrics"]["dr"]
    assert dr["mean"] == pytest.approx(0.290474, abs=1e-6)
    assert dr["mean_excl_failed"] == pytest.approx(0.387298, abs=1e-6)
    assert (dr["n"], dr["failed"], dr["n_scored"]) == (4, 1, 3)
    lo, hi = dr["ci95"]
    assert lo < dr["mean"] < hi
    md = (run / "report.md").read_text()
    assert "| dr | 0.290 |" in md and "| 4 | 1 | 0.387 | 3 |" in md


def test_report_renders_a_copy_of_a_real_run_if_present(tmp_path):
    from pathlib import Path

    real = Path(__file__).resolve().parents[3] / "benchmarks/results/compare/asqa/closed_book"
    if not (real / "results.jsonl").is_file():
        pytest.skip("no real run to render")
    shutil.copytree(real, tmp_path / "run")
    run = load_run(tmp_path / "run")
    summary = write_run_report(tmp_path / "run", plots=False)
    assert summary["n"] == len(run.rows) and "rouge-l" in summary["metrics"]
