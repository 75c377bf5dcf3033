"""The evaluation runner: per-example JSONL, resume after a kill, refusal to mix runs."""

from __future__ import annotations

import json

import dspy
import pytest

from ambiqa.errors import ConfigError
from ambiqa.evaluation.runner import RunSpec, evaluate


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
