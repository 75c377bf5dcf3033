"""The evaluation runner: per-example JSONL, resume after a kill, refusal to mix runs."""

from __future__ import annotations

import errno
import json
import time

import dspy
import pytest

from ambiqa.errors import ArtifactError, ConfigError
from ambiqa.evaluation import runner as runner_mod
from ambiqa.evaluation.runner import ResultsFile, RunSpec, call_with_timeout, evaluate


class EchoProgram:
    """Answers with the question; fails on questions containing 'boom'."""

    def __init__(self):
        self.calls = []

    def __call__(self, question):
        self.calls.append(question)
        if "boom" in question:
            raise RuntimeError("exploded")
        return dspy.Prediction(answer=question, interpretations=[], passages=[],
                               trace={})


def _examples(n, bad=()):
    return [dspy.Example(id=f"q{i}", question=("boom " if i in bad else "") + f"question {i}",
                         answers=[f"question {i}"]).with_inputs("question") for i in range(n)]


def _em(ex, pred):
    return float(pred.answer == ex.answers[0])


def test_rows_are_written_and_resume_skips_finished(tmp_path):
    spec = RunSpec(program="echo", data="toy:dev:3", metrics=["em"])
    prog = EchoProgram()
    summary = evaluate(prog, _examples(3), {"em": _em}, out_dir=tmp_path, spec=spec,
                       progress=False)
    assert summary["n"] == 3 and summary["metrics"]["em"]["mean"] == 1.0
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["q0", "q1", "q2"]
    # a kill mid-write leaves a torn last line: resume drops it and redoes only that example
    with open(tmp_path / "results.jsonl", "a") as fh:
        fh.write('{"id": "q3", "quest')
    prog2 = EchoProgram()
    spec5 = RunSpec(program="echo", data="toy:dev:5", metrics=["em"])
    summary = evaluate(prog2, _examples(5), {"em": _em}, out_dir=tmp_path, spec=spec5,
                       resume=True, progress=False)
    assert prog2.calls == ["question 3", "question 4"]
    assert summary["n"] == 5
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["q0", "q1", "q2", "q3", "q4"]


def test_refuses_to_mix_runs_and_to_overwrite(tmp_path):
    spec = RunSpec(program="echo", data="toy:dev:2", metrics=["em"])
    evaluate(EchoProgram(), _examples(2), {"em": _em}, out_dir=tmp_path, spec=spec,
             progress=False)
    with pytest.raises(ConfigError, match="already holds a run"):
        evaluate(EchoProgram(), _examples(2), {"em": _em}, out_dir=tmp_path, spec=spec,
                 progress=False)
    other = RunSpec(program="diva", data="toy:dev:2", metrics=["em"])
    with pytest.raises(ConfigError, match="refusing to mix"):
        evaluate(EchoProgram(), _examples(2), {"em": _em}, out_dir=tmp_path, spec=other,
                 resume=True, progress=False)
    other_split = RunSpec(program="echo", data="toy:train:2", metrics=["em"])
    with pytest.raises(ConfigError, match="refusing to mix"):
        evaluate(EchoProgram(), _examples(2), {"em": _em}, out_dir=tmp_path, spec=other_split,
                 resume=True, progress=False)


def test_a_failing_example_is_recorded_not_fatal(tmp_path):
    spec = RunSpec(program="echo", data="toy:dev:5", metrics=["em"])
    summary = evaluate(EchoProgram(), _examples(5, bad={2}), {"em": _em}, out_dir=tmp_path,
                       spec=spec, progress=False)
    assert summary["n"] == 5 and summary["n_errors"] == 1
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert rows[2]["error"] == "RuntimeError: exploded"


def test_too_many_failures_stop_the_run_keeping_finished_rows(tmp_path):
    spec = RunSpec(program="echo", data="toy:dev:8", metrics=["em"])
    with pytest.raises(ConfigError, match="examples failed"):
        evaluate(EchoProgram(), _examples(8, bad={0, 1, 2, 3}), {"em": _em}, out_dir=tmp_path,
                 spec=spec, progress=False, max_error_rate=0.5)
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 4


def test_parallel_equals_sequential(tmp_path):
    one = evaluate(EchoProgram(), _examples(6), {"em": _em}, threads=1, progress=False)
    many = evaluate(EchoProgram(), _examples(6), {"em": _em}, threads=4, progress=False)
    assert one["metrics"] == many["metrics"] and one["n"] == many["n"]


# ---------------------------------------------------------------- deadlines, retries, disk full

class SlowProgram(EchoProgram):
    """Hangs (sleeps) on questions containing 'slow'."""

    def __call__(self, question):
        if "slow" in question:
            time.sleep(3.0)
        return super().__call__(question)


def test_a_hung_example_is_recorded_as_a_timeout_not_a_hang(tmp_path):
    exs = _examples(4)
    exs[1] = dspy.Example(id="q1", question="slow question 1",
                          answers=["slow question 1"]).with_inputs("question")
    spec = RunSpec(program="echo", data="toy:dev:4", metrics=["em"])
    t0 = time.perf_counter()
    summary = evaluate(SlowProgram(), exs, {"em": _em}, out_dir=tmp_path, spec=spec,
                       progress=False, timeout_s=0.3, report=False)
    assert time.perf_counter() - t0 < 2.5  # did not wait for the 3 s sleep
    rows = {r["id"]: r for r in ResultsFile(tmp_path / "results.jsonl").read()}
    assert rows["q1"]["error"].startswith("Timeout: no result after 0.3 s")
    assert summary["n"] == 4 and summary["n_errors"] == 1
    assert summary["metrics"]["em"] == {"mean": 1.0, "ci95": [1.0, 1.0], "n": 3}


def test_call_with_timeout_passes_results_errors_and_context():
    import contextvars

    var = contextvars.ContextVar("v", default="unset")
    var.set("caller")
    assert call_with_timeout(lambda: var.get(), 1.0) == "caller"  # context travels
    assert call_with_timeout(lambda: 7, None) == 7
    with pytest.raises(ZeroDivisionError):
        call_with_timeout(lambda: 1 / 0, 1.0)


def test_retry_errors_supersedes_failed_rows(tmp_path):
    spec = RunSpec(program="echo", data="toy:dev:4", metrics=["em"])
    evaluate(EchoProgram(), _examples(4, bad={2}), {"em": _em}, out_dir=tmp_path, spec=spec,
             progress=False, report=False)
    # plain resume keeps the failure; --retry-errors reruns only that example
    prog = EchoProgram()
    s = evaluate(prog, _examples(4), {"em": _em}, out_dir=tmp_path, spec=spec, resume=True,
                 progress=False, report=False)
    assert prog.calls == [] and s["n_errors"] == 1
    prog = EchoProgram()
    s = evaluate(prog, _examples(4), {"em": _em}, out_dir=tmp_path, spec=spec, resume=True,
                 retry_errors=True, progress=False, report=False)
    assert prog.calls == ["question 2"]
    assert s["n"] == 4 and s["n_errors"] == 0 and s["metrics"]["em"]["mean"] == 1.0
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 5  # append-only: the old row stays in the file, the last one counts
    assert [r["id"] for r in ResultsFile(tmp_path / "results.jsonl").read()] == [
        "q0", "q1", "q3", "q2"]


def test_disk_full_stops_the_run_and_keeps_written_rows(tmp_path, monkeypatch):
    spec = RunSpec(program="echo", data="toy:dev:6", metrics=["em"])
    real_fsync, calls = runner_mod.os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(runner_mod.os, "fsync", fsync)
    with pytest.raises(ArtifactError, match="disk full") as err:
        evaluate(EchoProgram(), _examples(6), {"em": _em}, out_dir=tmp_path, spec=spec,
                 progress=False, report=False)
    assert "--resume" in str(err.value)
    kept = [r["id"] for r in ResultsFile(tmp_path / "results.jsonl").read()]
    assert kept[:2] == ["q0", "q1"]
    monkeypatch.setattr(runner_mod.os, "fsync", real_fsync)
    prog = EchoProgram()
    s = evaluate(prog, _examples(6), {"em": _em}, out_dir=tmp_path, spec=spec, resume=True,
                 progress=False, report=False)
    assert s["n"] == 6 and "question 0" not in prog.calls and "question 1" not in prog.calls


def test_summary_write_failure_is_clear_and_keeps_results(tmp_path, monkeypatch):
    from ambiqa.evaluation import report as report_mod

    spec = RunSpec(program="echo", data="toy:dev:3", metrics=["em"])

    def full(path, obj):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report_mod, "atomic_write_json", full)
    with pytest.raises(ArtifactError, match="disk full"):
        evaluate(EchoProgram(), _examples(3), {"em": _em}, out_dir=tmp_path, spec=spec,
                 progress=False)
    assert len(ResultsFile(tmp_path / "results.jsonl").read()) == 3


def test_unwritable_run_directory_is_refused_before_any_work(tmp_path, monkeypatch):
    spec = RunSpec(program="echo", data="toy:dev:2", metrics=["em"])
    a_file = tmp_path / "file"
    a_file.write_text("x")
    prog = EchoProgram()
    with pytest.raises(ConfigError, match="is a file"):
        evaluate(prog, _examples(2), {"em": _em}, out_dir=a_file, spec=spec, progress=False)
    with pytest.raises(ConfigError, match="cannot create run directory"):
        evaluate(prog, _examples(2), {"em": _em}, out_dir=a_file / "sub", spec=spec,
                 progress=False)

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(runner_mod.tempfile, "mkstemp", denied)
    with pytest.raises(ConfigError, match="not writable: Permission denied"):
        evaluate(prog, _examples(2), {"em": _em}, out_dir=tmp_path / "ro", spec=spec,
                 progress=False)
    assert prog.calls == []


def test_too_many_failures_stop_queued_examples_with_threads(tmp_path):
    prog = EchoProgram()
    spec = RunSpec(program="echo", data="toy:dev:40", metrics=["em"])
    with pytest.raises(ConfigError, match="examples failed"):
        evaluate(prog, _examples(40, bad=set(range(40))), {"em": _em}, out_dir=tmp_path,
                 spec=spec, threads=2, progress=False, report=False)
    assert len(prog.calls) < 40  # queued examples were not started once the run stopped


def test_results_without_run_json_are_not_mixed_into(tmp_path):
    (tmp_path / "results.jsonl").write_text('{"id": "q0", "error": null}\n')
    spec = RunSpec(program="echo", data="toy:dev:2", metrics=["em"])
    with pytest.raises(ConfigError, match="no run.json"):
        evaluate(EchoProgram(), _examples(2), {"em": _em}, out_dir=tmp_path, spec=spec,
                 progress=False)
    assert (tmp_path / "results.jsonl").read_text() == '{"id": "q0", "error": null}\n'


# ---------------------------------------------------------------- compatibility of run.json

OLD_RUN_JSON = {"program": "closed_book", "data": "asqa:dev:10",
                "metrics": ["str-em", "rouge-l", "d-f1", "dr"],
                "reader": "lm-reader:embedded/qwen2.5-coder-0.5b",
                "lm": "embedded:qwen2.5-coder-0.5b"}


def test_runspec_reads_and_writes_the_old_format_unchanged():
    spec = RunSpec.from_dict(OLD_RUN_JSON)
    assert spec.to_dict() == OLD_RUN_JSON  # no new keys appear when they are unset
    assert spec.dataset == "asqa:dev"
    newer = RunSpec.from_dict({**OLD_RUN_JSON, "index": "bm25:wiki-bm25", "future": 1})
    assert newer.to_dict() == {**OLD_RUN_JSON, "index": "bm25:wiki-bm25", "future": 1}


def test_an_old_run_extends_with_additive_run_json(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({**OLD_RUN_JSON, "program": "echo",
                                                   "data": "toy:dev:2"}))
    spec = RunSpec(program="echo", data="toy:dev:3", metrics=["em"], index="bm25:x")
    evaluate(EchoProgram(), _examples(3), {"em": _em}, out_dir=tmp_path, spec=spec,
             resume=True, progress=False)
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["data"] == "toy:dev:3" and meta["index"] == "bm25:x"
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("run", "n", "n_errors", "metrics", "cost"):  # the keys older readers use
        assert key in summary
    assert (tmp_path / "report.md").is_file() and (tmp_path / "plots" / "metrics.png").is_file()


def test_a_resume_asking_for_fewer_examples_keeps_the_larger_spec(tmp_path):
    spec5 = RunSpec(program="echo", data="toy:dev:5", metrics=["em"])
    evaluate(EchoProgram(), _examples(5), {"em": _em}, out_dir=tmp_path, spec=spec5,
             progress=False)
    spec3 = RunSpec(program="echo", data="toy:dev:3", metrics=["em"])
    prog = EchoProgram()
    summary = evaluate(prog, _examples(3), {"em": _em}, out_dir=tmp_path, spec=spec3,
                       resume=True, progress=False)
    assert prog.calls == [] and summary["n"] == 5
    # run.json still describes what results.jsonl holds: five examples, not three
    assert json.loads((tmp_path / "run.json").read_text())["data"] == "toy:dev:5"
