"""Stale rows (issue 42): data fingerprints guard ``merge`` and ``--resume``; ``report`` says
when a run is incomplete.

Before: ``ambiqa merge`` joined parts made from different versions of the data (an edited or
deleted row: exit 0, 8 rows for a 7-row file); ``--resume`` after a data row was deleted kept
its row (summary n = 9 for 8 rows); ``ambiqa report`` on a killed run (12 of 40 done) said
"examples: 12" with no warning. Now each run records ``data_sha`` / ``data_rows`` (a part, those
of the whole data set) in run.json; merge refuses parts whose data differ, a resume sets the
rows of deleted questions aside in ``results.stale.jsonl`` (one line says how many), and a
report opens with "incomplete run: n of N planned".
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ambiqa.cli import build_parser, main
from ambiqa.cli.eval_cmds import evaluate_from_args
from ambiqa.data import demo_corpus_path
from ambiqa.data.corpus import load_corpus
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import vanilla_rag_lm
from tests.faults.conftest import cli_env, run_cli

pytestmark = pytest.mark.fault("Run directory")


@pytest.fixture(scope="module")
def retriever():
    return InMemoryRetriever(load_corpus(demo_corpus_path()))


def _rows(n: int) -> list[dict]:
    return [{"id": f"q{i}", "question": f"Who played Weasley number {i}?",
             "answers": [f"Actor {i}"]} for i in range(1, n + 1)]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _evaluate(data: Path, out: Path, retriever, *extra: str) -> dict:
    args = build_parser().parse_args(["evaluate", "vanilla_rag", "--data", f"jsonl:{data}",
                                      "--metrics", "em,f1", "--out", str(out),
                                      *extra])
    summary, _ = evaluate_from_args(args, lm=vanilla_rag_lm(), retriever=retriever,
                                    progress=False)
    return summary


def _ids(run: Path, name: str = "results.jsonl") -> list[str]:
    path = run / name
    if not path.exists():
        return []
    return [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]


def _run_and_main(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


# ---- merge -----------------------------------------------------------------------------------
@pytest.mark.parametrize("change", ["deleted", "edited"])
def test_merge_refuses_parts_of_different_data(tmp_path, retriever, capsys, change,
                                               record_property):
    """Part 1/2 from the 8-row file, part 2/2 from the file after a row was deleted (7 rows:
    the slices no longer tile one data set) or edited (same ids, another gold answer)."""
    rows = _rows(8)
    data = _write(tmp_path / "q.jsonl", rows)
    _evaluate(data, tmp_path / "p1", retriever, "--part", "1/2")
    if change == "deleted":
        rows = rows[:2] + rows[3:]
    else:
        rows[6] = {**rows[6], "answers": ["Someone else"]}
    _write(data, rows)
    _evaluate(data, tmp_path / "p2", retriever, "--part", "2/2")
    code, err = _run_and_main(["merge", str(tmp_path / "p1"), str(tmp_path / "p2"),
                               "--out", str(tmp_path / "m"), "--no-plots"], capsys)
    assert code == 2, err
    assert "different versions of the data" in err and "Traceback" not in err
    assert "8 rows" in err and (("7 rows" in err) if change == "deleted" else True)
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").iterdir())
    # the parts made from the same data still merge: every question once
    _evaluate(data, tmp_path / "p1b", retriever, "--part", "1/2")
    code, err = _run_and_main(["merge", str(tmp_path / "p1b"), str(tmp_path / "p2"),
                               "--out", str(tmp_path / "m2"), "--no-plots"], capsys)
    assert code == 0, err
    merged = _ids(tmp_path / "m2")
    lost = len(set(r["id"] for r in rows) ^ set(merged)) + len(merged) - len(set(merged))
    record_property("data_lost", lost)
    assert lost == 0 and len(merged) == len(rows)
    meta = json.loads((tmp_path / "m2" / "run.json").read_text())
    assert meta["data_rows"] == len(rows) and "part" not in meta


def test_each_part_records_the_whole_datas_fingerprint(tmp_path, retriever):
    data = _write(tmp_path / "q.jsonl", _rows(5))
    _evaluate(data, tmp_path / "whole", retriever)
    _evaluate(data, tmp_path / "p1", retriever, "--part", "1/2")
    whole = json.loads((tmp_path / "whole" / "run.json").read_text())
    part = json.loads((tmp_path / "p1" / "run.json").read_text())
    assert whole["data_rows"] == part["data_rows"] == 5
    assert whole["data_sha"] == part["data_sha"] and len(part["part_ids"]) == 2


# ---- resume ----------------------------------------------------------------------------------
def test_resume_drops_rows_of_deleted_questions(tmp_path, retriever, caplog, record_property):
    rows = _rows(9)
    data = _write(tmp_path / "q.jsonl", rows)
    out = tmp_path / "run"
    assert _evaluate(data, out, retriever)["n"] == 9
    kept = rows[:4] + rows[5:]  # q5 deleted from the data
    _write(data, kept)
    with caplog.at_level(logging.WARNING):
        summary = _evaluate(data, out, retriever, "--resume")
    assert summary["n"] == 8 and summary["metrics"]["em"]["n"] == 8
    assert sorted(_ids(out)) == sorted(r["id"] for r in kept)
    assert _ids(out, "results.stale.jsonl") == ["q5"]          # set aside, not destroyed
    said = [r.getMessage() for r in caplog.records if "no longer in the data" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("dropped 1 recorded row(s)"), said
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["n"] == 8 and on_disk["run"]["data_rows"] == 8
    # the same rows as an uninterrupted run on the data as it is now
    fresh = _evaluate(data, tmp_path / "fresh", retriever)
    by_id = {json.loads(line)["id"]: json.loads(line)["metrics"]
             for line in (out / "results.jsonl").read_text().splitlines()}
    ref = {json.loads(line)["id"]: json.loads(line)["metrics"]
           for line in (tmp_path / "fresh" / "results.jsonl").read_text().splitlines()}
    lost = sum(1 for i in ref if by_id.get(i) != ref[i]) + len(set(by_id) - set(ref))
    record_property("data_lost", lost)
    assert lost == 0 and fresh["n"] == 8
    # `ambiqa report` afterwards reads the same 8 rows (the file was rewritten, not masked)
    assert main(["report", str(out), "--no-plots"]) == 0
    assert json.loads((out / "summary.json").read_text())["n"] == 8


def test_resume_asking_for_fewer_keeps_the_runs_own_rows(tmp_path, retriever):
    """A resume of ``jsonl:FILE:3`` into a run of the first 6 keeps rows 4-6: they are the
    run's own (its spec keeps the larger count), not stale."""
    data = _write(tmp_path / "q.jsonl", _rows(6))
    out = tmp_path / "run"
    args = ["evaluate", "vanilla_rag", "--metrics", "em", "--out", str(out)]
    for spec in (f"jsonl:{data}:6", f"jsonl:{data}:3"):
        parsed = build_parser().parse_args([*args, "--data", spec, *(
            ["--resume"] if spec.endswith(":3") else [])])
        summary, _ = evaluate_from_args(parsed, lm=vanilla_rag_lm(), retriever=retriever,
                                        progress=False)
    assert summary["n"] == 6 and not (out / "results.stale.jsonl").exists()


# ---- report on a killed run ------------------------------------------------------------------
@pytest.mark.parametrize("recorded", ["data_rows", "spec-count-only"])
def test_report_on_a_killed_run_warns_at_the_top(tmp_path, retriever, caplog, recorded):
    data = _write(tmp_path / "q.jsonl", _rows(40))
    out = tmp_path / "run"
    _evaluate(data, out, retriever, "--threads", "4")
    lines = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text("\n".join(lines[:12]) + "\n")  # killed after 12
    if recorded == "spec-count-only":  # a run.json written before data_rows existed
        meta = json.loads((out / "run.json").read_text())
        for key in ("data_rows", "data_sha"):
            meta.pop(key)
        meta["data"] = f"jsonl:{data}:40"
        (out / "run.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING):
        assert main(["report", str(out), "--no-plots"]) == 0
    assert "incomplete run: 12 of 40 planned questions done" in caplog.text
    if recorded == "data_rows":  # through the real entry point: the warning on stderr
        res = run_cli(["report", str(out), "--no-plots"], cli_env(tmp_path), timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        assert "incomplete run: 12 of 40 planned questions done" in res.stderr
    md = (out / "report.md").read_text()
    head = md.split("## ")[0]                                 # before the first section
    assert "incomplete run: 12 of 40 planned questions done" in head
    assert "incomplete run" in (out / "report.html").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 12 and summary["n_planned"] == 40


def test_report_on_a_complete_run_has_no_warning(tmp_path, retriever, caplog):
    data = _write(tmp_path / "q.jsonl", _rows(4))
    out = tmp_path / "run"
    _evaluate(data, out, retriever)
    with caplog.at_level(logging.WARNING):
        assert main(["report", str(out), "--no-plots"]) == 0
    assert "incomplete" not in caplog.text
    assert "incomplete" not in (out / "report.md").read_text()
