"""`ambiqa compare`, benchmarks/compare_methods.py and the evaluate CLI's bad-input paths."""

from __future__ import annotations

import errno
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from ambiqa.cli import EXIT_USER_ERROR, main
from ambiqa.errors import ConfigError
from ambiqa.evaluation.compare import compare_runs, paired_bootstrap_ci
from ambiqa.evaluation.runner import ResultsFile, bootstrap_ci
from ambiqa.testing import scripted_lm

ROOT = Path(__file__).resolve().parents[2]


def _write_run(d, program, data, scores, lm_calls=1):
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps({"program": program, "data": data,
                                            "metrics": ["em", "f1"], "reader": None,
                                            "lm": "scripted"}))
    rows = []
    for i, v in scores.items():
        err = v is None
        rows.append({"id": i, "question": i, "error": "boom" if err else None,
                     "prediction": None if err else {"answer": "x"},
                     "metrics": {} if err else {"em": v, "f1": v},
                     "cost": {"lm_calls": lm_calls, "wall_s": 0.5 * lm_calls}})
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_paired_differences_on_shared_ids(tmp_path):
    a = _write_run(tmp_path / "a", "vanilla_rag", "toy:dev:5",
                   {"q0": 1.0, "q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": None})
    b = _write_run(tmp_path / "b", "diva", "toy:dev:6",
                   {"q0": 1.0, "q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": 1.0, "q5": 1.0},
                   lm_calls=5)
    res = compare_runs([a, b], metrics=["em"])
    (p,) = res["paired"]
    # shared scored ids: q0..q3 (q4 failed in a, q5 only in b); diffs 0, 1, 0, 0 -> 0.25
    assert p["n_shared"] == 4 and p["diff"] == pytest.approx(0.25)
    assert p["baseline_mean"] == pytest.approx(0.5) and p["run_mean"] == pytest.approx(0.75)
    assert p["ci95"] == list(bootstrap_ci([0.0, 1.0, 0.0, 0.0]))
    assert paired_bootstrap_ci([1, 0], [1, 1]) == bootstrap_ci([0, 1])
    # each run's own summary is on all its scored examples
    assert [r["metrics"]["em"]["n"] for r in res["runs"]] == [4, 6]
    # consistency across runs (EM = 1 right) on ids both answered: q0..q3
    cons = res["consistency"]
    # b is right on q1 where a is wrong; a is wrong on q1, q3 -> RWR(b, a) = 1/2
    assert cons["rwr"]["diva"]["vanilla_rag"] == pytest.approx(1 / 2)
    assert cons["rwr"]["vanilla_rag"]["diva"] == 0.0


def test_compare_refuses_other_data_and_missing_metrics(tmp_path):
    a = _write_run(tmp_path / "a", "resp", "hotpotqa:dev:3", {"q0": 1.0})
    b = _write_run(tmp_path / "b", "eor", "nq:oracle:3", {"q0": 1.0})
    with pytest.raises(ConfigError, match="different data sets or splits"):
        compare_runs([a, b])
    c = _write_run(tmp_path / "c", "ircot", "hotpotqa:train:3", {"q0": 1.0})
    with pytest.raises(ConfigError, match="different data sets or splits"):
        compare_runs([a, c])
    d = _write_run(tmp_path / "d", "ircot", "hotpotqa:dev:9", {"q0": 1.0})
    with pytest.raises(ConfigError, match="not in run"):
        compare_runs([a, d], metrics=["rouge-l"])
    with pytest.raises(ConfigError, match="at least two"):
        compare_runs([a])


def test_compare_cli_writes_markdown_and_plot(tmp_path, capsys):
    a = _write_run(tmp_path / "runs" / "a", "vanilla_rag", "toy:dev:4",
                   {"q0": 1.0, "q1": 0.0, "q2": 1.0, "q3": 0.0})
    b = _write_run(tmp_path / "runs" / "b", "diva", "toy:dev:4",
                   {"q0": 1.0, "q1": 1.0, "q2": 1.0, "q3": 1.0}, lm_calls=6)
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 0
    md = (out / "compare.md").read_text()
    # diffs 0, 1, 0, 1: CI [0, 1] touches 0, so no star
    assert "| diva | em | 4 | 0.500 | 1.000 | 0.500 | [0.000, 1.000] |" in md
    assert (out / "quality_vs_cost.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "comparison.json").read_text())["dataset"] == "toy:dev"
    c = _write_run(tmp_path / "runs" / "c", "eor", "nq:oracle:4", {"q0": 1.0})
    capsys.readouterr()
    assert main(["compare", str(a), str(c), "--out", str(out)]) == EXIT_USER_ERROR
    assert "different data sets" in capsys.readouterr().err


# ---------------------------------------------------------------- the evaluate CLI, bad input


@pytest.fixture()
def scripted_cli(monkeypatch):
    """`ambiqa evaluate` with a scripted LM instead of the embedded one."""
    from ambiqa.cli import eval_cmds
    from ambiqa.lm import configure

    lm = scripted_lm({"ClosedBookLongAnswer": {"long_answer": "It was 2007."},
                      "ReadShortAnswer": {"answer": "2007"}})
    monkeypatch.setattr(eval_cmds, "lm_from_args", lambda args: configure(lm))
    yield lm
    import dspy

    dspy.configure(lm=None)


def _evaluate(out, *extra, data="asqa:dev:2", program="closed_book"):
    return main(["evaluate", program, "--data", data, "--metrics", "str-em,rouge-l,d-f1,dr",
                 "--out", str(out), *extra])


@pytest.mark.parametrize("argv_extra, data, program, message", [
    ((), "asqa:nosplit", "closed_book", "unknown split 'nosplit'"),
    ((), "hotpotqa:/no/such/dev.json", "closed_book", "data file not found"),
    ((), "asqa:dev:2", "closed_bok", "did you mean 'closed_book'"),
    (("--metrics", "rouge-k"), "asqa:dev:2", "closed_book", "did you mean 'rouge-l'"),
    (("--threads", "0"), "asqa:dev:2", "closed_book", "--threads must be at least 1"),
    (("--timeout-s", "-1"), "asqa:dev:2", "closed_book", "--timeout-s must be positive"),
])
def test_evaluate_bad_input_is_one_clear_error(tmp_path, capsys, shared_data, argv_extra,
                                               data, program, message):
    out = tmp_path / "run"
    argv = ["evaluate", program, "--data", data, "--out", str(out), *argv_extra]
    assert main(argv) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (out / "run.json").exists()  # nothing written for a rejected command


def test_evaluate_resume_extend_and_refusals_keep_results(tmp_path, capsys, shared_data,
                                                          scripted_cli):
    out = tmp_path / "run"
    assert _evaluate(out) == 0
    assert len(ResultsFile(out / "results.jsonl").read()) == 2
    snapshot = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    # the same command again: refused (would overwrite), files untouched
    assert _evaluate(out) == EXIT_USER_ERROR
    assert "already holds a run" in capsys.readouterr().err
    # another program into this directory: refused, even with --resume
    assert _evaluate(out, "--resume", program="vanilla_rag") == EXIT_USER_ERROR
    assert "refusing to mix" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == snapshot
    # --resume extends to more examples of the same split
    assert _evaluate(out, "--resume", data="asqa:dev:3") == 0
    assert len(ResultsFile(out / "results.jsonl").read()) == 3
    assert json.loads((out / "run.json").read_text())["data"] == "asqa:dev:3"
    assert (out / "report.md").is_file()


def test_evaluate_unwritable_and_disk_full(tmp_path, capsys, shared_data, scripted_cli,
                                           monkeypatch):
    from ambiqa.evaluation import runner as runner_mod

    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert _evaluate(blocker / "run") == EXIT_USER_ERROR
    assert "cannot create run directory" in capsys.readouterr().err

    out = tmp_path / "run"
    real_fsync, calls = runner_mod.os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(runner_mod.os, "fsync", fsync)
    assert _evaluate(out, data="asqa:dev:3") == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "disk full" in err and "Traceback" not in err
    first = ResultsFile(out / "results.jsonl").read()[0]
    monkeypatch.setattr(runner_mod.os, "fsync", real_fsync)
    assert _evaluate(out, "--resume", data="asqa:dev:3") == 0
    rows = ResultsFile(out / "results.jsonl").read()
    assert len(rows) == 3 and rows[0] == first  # the row written before the failure is kept


# ---------------------------------------------------------------- benchmarks/compare_methods.py


def _load_compare_methods():
    spec = importlib.util.spec_from_file_location(
        "compare_methods", ROOT / "benchmarks" / "compare_methods.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["compare_methods"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_compare_methods_runs_resumes_and_tabulates(tmp_path, shared_data, use_lm):
    from ambiqa.retrieval.base import InMemoryRetriever
    from ambiqa.types import Passage

    cm = _load_compare_methods()
    lm = use_lm(scripted_lm({
        "ClosedBookLongAnswer": {"long_answer": "The first iPhone came out in 2007."},
        "ClarifyFromPassages": {"pairs": [{"question": "When?", "answer": "2007",
                                           "passage": 1}]},
        "WriteLongAnswer": {"long_answer": "It was released on June 29, 2007."},
        "ReadShortAnswer": {"answer": "2007"},
    }))
    retriever = InMemoryRetriever([Passage("p1", "iPhone", "The iPhone was released in 2007."),
                                   Passage("p2", "Apple", "Apple makes phones.")])
    root = tmp_path / "compare"
    logs: list[str] = []
    st = cm.run_plan(["asqa"], ["closed_book", "vanilla_rag"], 2, root, lm=None,
                     index="memory:test", lm_object=lm, retriever=retriever, progress=False,
                     log=logs.append)
    assert [s["ok"] for s in st] == [True, True]
    meta = json.loads((root / "asqa" / "vanilla_rag" / "run.json").read_text())
    assert meta["program"] == "vanilla_rag" and meta["data"] == "asqa:dev:2"
    assert meta["metrics"] == ["str-em", "rouge-l", "d-f1", "dr"]
    assert meta["reader"] == "lm-reader:scripted/fake" and meta["index"] == "memory:test"
    # a second pass with a larger n resumes and extends, redoing nothing
    calls = len(lm.engine.calls)
    cm.run_plan(["asqa"], ["closed_book"], 3, root, lm=None, index="memory:test",
                lm_object=lm, retriever=retriever, progress=False, log=logs.append)
    assert logs[-1].endswith("--resume")
    assert len(ResultsFile(root / "asqa" / "closed_book" / "results.jsonl").read()) == 3
    assert lm.engine.count("ClosedBookLongAnswer") == 3  # 2 + 1 new, not 2 + 3
    assert len(lm.engine.calls) > calls
    # report-only: one table per data set, nothing written inside run directories
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    tables = cm.write_tables(root)
    text = tables.read_text()
    assert "## asqa (asqa:dev)" in text
    assert "| closed_book | asqa:dev:3 | 3 | 0 |" in text
    assert "| vanilla_rag | asqa:dev:2 | 2 | 0 |" in text
    assert "ambiqa evaluate vanilla_rag --data asqa:dev:2" in text
    after = sorted(p.relative_to(root) for p in root.rglob("*"))
    assert set(after) - set(before) == {Path("TABLES.md"), Path("quality_vs_cost.png")}


def test_compare_methods_report_only_cli_on_empty_root(tmp_path):
    cm = _load_compare_methods()
    assert cm.main(["--report-only", "--root", str(tmp_path / "none"),
                    "--tables", str(tmp_path / "T.md")]) == 0
    assert "No run directories found yet." in (tmp_path / "T.md").read_text()
    assert cm.main(["--datasets", "asqa,nope", "--root", str(tmp_path)]) == 2
