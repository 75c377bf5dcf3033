"""Every bad input gets one line naming the field and the fix (issue 33 items 4 and 6).

Before: a deeply nested artifact or results row ended in a RecursionError; an artifact
``program_config`` with a ``retriever`` key in a TypeError; non-string ``instructions`` in an
AttributeError inside DSPy; ``--k -1`` and ``--max-tokens 0`` reached the model;
``export --verify --n -1`` silently checked 2 of 3 questions and ``--n 0`` exited 1 with no
message; a results row with ``"metrics": "oops"`` crashed ``report``; a corrupt middle line of
``results.jsonl`` made ``report`` count n = 19 without a word; there was no artifact size cap.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ambiqa.errors import ArtifactError
from tests.faults.conftest import cli_env, run_cli

pytestmark = pytest.mark.fault("Bad inputs")


@pytest.fixture()
def artifact(tmp_path) -> Path:
    """A real artifact of closed_book (no retriever, no LM needed to load)."""
    from ambiqa.optimizers.artifact import save_artifact
    from ambiqa.programs.registry import build_program

    program = build_program("closed_book")
    manifest = {"program": "closed_book", "program_config": program.config(),
                "ambiqa_version": "test", "lm": "scripted/fake",
                "retriever": {"kind": None, "index": None, "fingerprint": None},
                "metric": "rouge-l", "optimizer": {"name": "none"},
                "created": "2026-01-01T00:00:00+00:00"}
    return save_artifact(tmp_path / "art.json", program, manifest)


def _edit(path: Path, fn) -> Path:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))
    return path


def _load(path: Path):
    from ambiqa.optimizers.artifact import load_artifact

    return load_artifact(path)


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "Traceback" not in text and len(text.splitlines()) <= 2, text  # message + fix
    return text


# ---- artifacts -----------------------------------------------------------------------------
def test_intact_artifact_loads(artifact):
    assert _load(artifact) is not None


def test_deeply_nested_artifact_is_one_line(artifact, record_property):
    deep = "[" * 100_000 + "]" * 100_000
    text = artifact.read_text()
    artifact.write_text(text[:-1].rstrip().rstrip("}") + f', "x": {deep}}}}}')
    with pytest.raises(ArtifactError, match="nests deeper than 64 levels") as err:
        _load(artifact)
    _one_line(err.value)
    record_property("cases", 1)


def test_artifact_size_cap_is_documented_and_overridable(artifact, monkeypatch):
    from ambiqa.optimizers.artifact import MAX_ARTIFACT_ENV, MAX_ARTIFACT_MB

    assert MAX_ARTIFACT_MB == 16.0
    big = "x" * (2 << 20)
    _edit(artifact, lambda d: d["state"]["predict"]["demos"].append(
        {"question": "q?", "long_answer": big}) if "predict" in d["state"] else
        next(iter(d["state"].values()))["demos"].append({"question": "q?", "long_answer": big}))
    monkeypatch.setenv(MAX_ARTIFACT_ENV, "1")
    with pytest.raises(ArtifactError, match=r"over the 1 MiB artifact cap") as err:
        _load(artifact)
    assert f"{MAX_ARTIFACT_ENV}=3" in _one_line(err.value)
    monkeypatch.setenv(MAX_ARTIFACT_ENV, "3")
    assert _load(artifact) is not None                    # raised cap: loads
    monkeypatch.setenv(MAX_ARTIFACT_ENV, "lots")
    from ambiqa.errors import ConfigError

    with pytest.raises(ConfigError, match=MAX_ARTIFACT_ENV):
        _load(artifact)


def test_program_config_with_a_retriever_key_is_one_line(artifact):
    _edit(artifact, lambda d: d["manifest"]["program_config"].update(retriever="bm25:x"))
    with pytest.raises(ArtifactError, match="program_config sets retriever") as err:
        _load(artifact)
    _one_line(err.value)


@pytest.mark.parametrize("value", [42, ["a", "b"], {"x": 1}, True])
def test_non_string_instructions_are_one_line(artifact, value):
    def bad(doc):
        for entry in doc["state"].values():
            entry["signature"]["instructions"] = value
    _edit(artifact, bad)
    with pytest.raises(ArtifactError, match="signature.instructions must be a string") as err:
        _load(artifact)
    _one_line(err.value)


@pytest.mark.parametrize("key,value", [("program", 7), ("optimizer", "knn"), ("lm", ["x"]),
                                       ("retriever", "bm25:x"), ("program_config", [1])])
def test_manifest_field_types_are_checked(artifact, key, value):
    _edit(artifact, lambda d: d["manifest"].__setitem__(key, value))
    with pytest.raises(ArtifactError, match=f"manifest.{key} must be") as err:
        _load(artifact)
    _one_line(err.value)


def test_cli_export_and_ask_of_a_bad_artifact_are_one_line(tmp_path, artifact):
    def bad(doc):
        for entry in doc["state"].values():
            entry["signature"]["instructions"] = 42
    _edit(artifact, bad)
    env = cli_env(tmp_path)
    for args in (["export", str(artifact)],
                 ["ask", "Who wrote Little Women?", "--artifact", str(artifact), "--lm",
                  "openai/x", "--api-base", "http://127.0.0.1:9/v1"]):
        res = run_cli(args, env, timeout=120)
        assert res.returncode == 2, (args, res.stderr[-1500:])
        assert "instructions must be a string" in res.stderr
        assert "Traceback" not in res.stderr


# ---- CLI integers, checked while parsing (before any model loads) --------------------------
@pytest.mark.parametrize("args,flag", [
    (["compile", "closed_book", "--optimizer", "labeled", "--k", "-1"], "--k"),
    (["evaluate", "closed_book", "--data", "asqa:dev:2", "--out", "OUT", "--max-tokens", "0"],
     "--max-tokens"),
    (["ask", "Who?", "--max-tokens", "-5"], "--max-tokens"),
    (["export", "ART", "--verify", "--n", "-1"], "--n"),
    (["export", "ART", "--verify", "--n", "0"], "--n"),
])
def test_cli_integers_are_refused_with_one_line(tmp_path, artifact, args, flag):
    args = [str(tmp_path / "out") if a == "OUT" else str(artifact) if a == "ART" else a
            for a in args]
    res = run_cli(args, cli_env(tmp_path), timeout=60)
    assert res.returncode == 2, res.stderr[-1000:]
    last = res.stderr.strip().splitlines()[-1]
    assert f"argument {flag}: must be at least" in last, res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()                # refused before touching anything


# ---- results rows --------------------------------------------------------------------------
def _run_dir(tmp_path: Path, n: int = 20) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"program": "echo", "data": f"toy:dev:{n}",
                                              "metrics": ["em"], "reader": None, "lm": None}))
    rows = [{"id": f"q{i}", "question": f"question {i}", "prediction": {"answer": "x"},
             "error": None, "metrics": {"em": 1.0}, "cost": {"lm_calls": 1}} for i in range(n)]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


@pytest.mark.parametrize("bad,why", [
    ('{"id": "q9", "metrics": "oops"}', "'metrics' must be an object"),
    ('{"id": "q9", "metrics": {"em": "high"}}', "metric 'em' must be a number"),
    ('{"id": "q9", "question": "q", "error": nul', "not a JSON row"),
    ('[1, 2, 3]', "must be a JSON object"),
    ('{"id": "q9", "x": ' + "[" * 50_000 + "]" * 50_000 + "}", "nests deeper"),
], ids=["metrics_str", "metric_value", "corrupt_middle", "not_object", "deep"])
def test_bad_results_row_is_named_by_line_number(tmp_path, bad, why, record_property):
    from ambiqa.evaluation.reports.report import write_run_report

    run = _run_dir(tmp_path)
    lines = (run / "results.jsonl").read_text().splitlines()
    lines[9] = bad                                         # line 10 of 20: not a torn tail
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ArtifactError) as err:
        write_run_report(run, plots=False)
    text = _one_line(err.value)
    assert "line 10" in text and why in text, text
    res = run_cli(["report", str(run), "--no-plots"], cli_env(tmp_path), timeout=120)
    assert res.returncode == 2 and "line 10" in res.stderr and "Traceback" not in res.stderr
    record_property("data_lost", 0)


def test_torn_last_line_is_still_tolerated(tmp_path):
    """A kill mid-write leaves a partial last line without a newline: that row is redone."""
    from ambiqa.evaluation.runs.run_dir import ResultsFile

    run = _run_dir(tmp_path)
    path = run / "results.jsonl"
    path.write_bytes(path.read_bytes() + b'{"id": "q20", "quest')
    assert len(ResultsFile(path).read()) == 20


def test_deep_run_json_is_one_line(tmp_path):
    from ambiqa.evaluation.runs.runner import RunSpec, check_run_dir

    run = _run_dir(tmp_path)
    (run / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ArtifactError, match="unreadable") as err:
        check_run_dir(run, RunSpec(program="echo", data="toy:dev:2", metrics=["em"]), True)
    _one_line(err.value)


# ---- report files are readable by others (0644 under the umask) ----------------------------
@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600)])
def test_report_and_compare_files_follow_the_umask(tmp_path, umask, mode):
    from ambiqa.evaluation.reports.compare import compare_runs, write_comparison
    from ambiqa.evaluation.reports.report import write_run_report

    run = _run_dir(tmp_path)
    old = os.umask(umask)
    try:
        write_run_report(run, plots=False)
        path = write_comparison(compare_runs([str(run), str(run)], allow_reader_mismatch=True),
                                tmp_path / "cmp")
    finally:
        os.umask(old)
    for written in (run / "report.md", run / "summary.json", path):
        assert stat.S_IMODE(written.stat().st_mode) == mode, written
