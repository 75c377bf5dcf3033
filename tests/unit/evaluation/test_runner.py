"""The evaluation runner: per-example JSONL, resume after a kill, refusal to mix runs."""

from __future__ import annotations

import errno
import json
import threading

import dspy
import pytest

from ambiqa.errors import ArtifactError, ConfigError, RunError
from ambiqa.evaluation.reports.report import write_run_report
from ambiqa.evaluation.runs import run_dir as run_dir_mod
from ambiqa.evaluation.runs import runner as runner_mod
from ambiqa.evaluation.runs.runner import ResultsFile, RunSpec, call_with_timeout, evaluate


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
    with pytest.raises(RunError, match="examples failed"):
        evaluate(EchoProgram(), _examples(8, bad={0, 1, 2, 3}), {"em": _em}, out_dir=tmp_path,
                 spec=spec, progress=False, max_error_rate=0.5)
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 4


class OrderedProgram(EchoProgram):
    """Right on even questions, wrong on odd ones, fails on 'boom'. With ``hold``, question 0
    waits until question 3 has finished, so a parallel run finishes out of input order."""

    def __init__(self, hold=False):
        super().__init__()
        self.hold = hold
        self.q3_done = threading.Event()
        self.waited = None
        self.finished = []

    def __call__(self, question):
        if self.hold and question.endswith("question 0"):
            self.waited = self.q3_done.wait(timeout=30)
        try:
            pred = super().__call__(question)
        finally:
            self.finished.append(question.rsplit(" ", 1)[1])
            if question.endswith("question 3"):
                self.q3_done.set()
        i = int(question.rsplit(" ", 1)[1])
        return pred if i % 2 == 0 else dspy.Prediction(answer="wrong", passages=[])


def test_parallel_run_scores_each_example_as_the_sequential_run(tmp_path):
    spec = RunSpec(program="ordered", data="toy:dev:6", metrics=["em"])
    exs = _examples(6, bad={4})
    one = evaluate(OrderedProgram(), exs, {"em": _em}, out_dir=tmp_path / "one", spec=spec,
                   threads=1, progress=False, report=False)
    prog = OrderedProgram(hold=True)
    many = evaluate(prog, exs, {"em": _em}, out_dir=tmp_path / "many", spec=spec, threads=4,
                    progress=False, report=False)
    assert prog.waited is True  # question 0 really ran while question 3 did
    assert prog.finished.index("3") < prog.finished.index("0")  # out of input order
    rows = {}
    for name in ("one", "many"):
        rows[name] = {r["id"]: (r["metrics"].get("em"), bool(r["error"]))
                      for r in ResultsFile(tmp_path / name / "results.jsonl").read()}
    assert rows["one"] == rows["many"] == {
        "q0": (1.0, False), "q1": (0.0, False), "q2": (1.0, False), "q3": (0.0, False),
        "q4": (None, True), "q5": (0.0, False)}
    # q0, q2 right; q4 failed and counts 0: 2 / 6; excluding the failure: 2 / 5
    for s in (one, many):
        em = s["metrics"]["em"]
        assert em["mean"] == pytest.approx(2 / 6) and em["failed"] == 1 and em["n"] == 6
        assert em["mean_excl_failed"] == pytest.approx(2 / 5) and em["n_scored"] == 5
    assert one["metrics"] == many["metrics"]


# ---------------------------------------------------------------- deadlines, retries, disk full

class SlowProgram(EchoProgram):
    """Blocks on questions containing 'slow' until the test releases it."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

    def __call__(self, question):
        if "slow" in question:
            self.entered.set()
            self.release.wait(timeout=60)
            self.finished.set()
        return super().__call__(question)


def test_a_hung_example_is_recorded_as_a_timeout_not_a_hang(tmp_path):
    exs = _examples(4)
    exs[1] = dspy.Example(id="q1", question="slow question 1",
                          answers=["slow question 1"]).with_inputs("question")
    spec = RunSpec(program="echo", data="toy:dev:4", metrics=["em"])
    prog = SlowProgram()
    try:
        summary = evaluate(prog, exs, {"em": _em}, out_dir=tmp_path, spec=spec,
                           progress=False, timeout_s=0.3, report=False)
        # the run finished while the slow call was still blocked: it did not wait for it
        assert prog.entered.is_set() and not prog.finished.is_set()
    finally:
        prog.release.set()
    rows = {r["id"]: r for r in ResultsFile(tmp_path / "results.jsonl").read()}
    assert rows["q1"]["error"].startswith("Timeout: no result after 0.3 s")
    assert summary["n"] == 4 and summary["n_errors"] == 1
    em = summary["metrics"]["em"]
    # the timed-out question scores 0 in the headline: 3 / 4; 1.0 over the other three
    assert (em["mean"], em["n"], em["failed"]) == (0.75, 4, 1)
    assert (em["mean_excl_failed"], em["n_scored"]) == (1.0, 3)


def test_call_with_timeout_passes_results_errors_and_context():
    import contextvars

    var = contextvars.ContextVar("v", default="unset")
    var.set("caller")
    assert call_with_timeout(lambda: var.get(), 1.0) == "caller"  # context travels
    assert call_with_timeout(lambda: 7, None) == 7
    with pytest.raises(ZeroDivisionError):
        call_with_timeout(lambda: 1 / 0, 1.0)


class FlakyProgram(EchoProgram):
    """Fails on question 2 (a fault of the moment, say an LM that was down)."""

    def __call__(self, question):
        if question == "question 2":
            self.calls.append(question)
            raise RuntimeError("exploded")
        return super().__call__(question)


def test_retry_errors_supersedes_failed_rows(tmp_path):
    spec = RunSpec(program="echo", data="toy:dev:4", metrics=["em"])
    evaluate(FlakyProgram(), _examples(4), {"em": _em}, out_dir=tmp_path, spec=spec,
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
    real_fsync, calls = run_dir_mod.os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(run_dir_mod.os, "fsync", fsync)
    with pytest.raises(ArtifactError, match="disk full") as err:
        evaluate(EchoProgram(), _examples(6), {"em": _em}, out_dir=tmp_path, spec=spec,
                 progress=False, report=False)
    assert "--resume" in str(err.value)
    kept = [r["id"] for r in ResultsFile(tmp_path / "results.jsonl").read()]
    assert kept[:2] == ["q0", "q1"]
    monkeypatch.setattr(run_dir_mod.os, "fsync", real_fsync)
    prog = EchoProgram()
    s = evaluate(prog, _examples(6), {"em": _em}, out_dir=tmp_path, spec=spec, resume=True,
                 progress=False, report=False)
    assert s["n"] == 6 and "question 0" not in prog.calls and "question 1" not in prog.calls


def test_summary_write_failure_is_clear_and_keeps_results(tmp_path, monkeypatch):
    from ambiqa.evaluation.reports import report as report_mod

    spec = RunSpec(program="echo", data="toy:dev:3", metrics=["em"])

    def full(path, obj):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report_mod, "atomic_write_json", full)
    with pytest.raises(ArtifactError, match="disk full"):
        evaluate(EchoProgram(), _examples(3), {"em": _em}, out_dir=tmp_path, spec=spec,
                 progress=False, report=write_run_report)
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

    monkeypatch.setattr(run_dir_mod.tempfile, "mkstemp", denied)
    with pytest.raises(ConfigError, match="not writable: Permission denied"):
        evaluate(prog, _examples(2), {"em": _em}, out_dir=tmp_path / "ro", spec=spec,
                 progress=False)
    assert prog.calls == []


def test_too_many_failures_stop_queued_examples_with_threads(tmp_path):
    prog = EchoProgram()
    spec = RunSpec(program="echo", data="toy:dev:40", metrics=["em"])
    with pytest.raises(RunError, match="examples failed"):
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
    old = {**OLD_RUN_JSON, "program": "echo", "data": "toy:dev:2", "metrics": ["em"]}
    (tmp_path / "run.json").write_text(json.dumps(old))
    spec = RunSpec(program="echo", data="toy:dev:3", metrics=["em"], reader=old["reader"],
                   lm=old["lm"])
    evaluate(EchoProgram(), _examples(3), {"em": _em}, out_dir=tmp_path, spec=spec,
             resume=True, progress=False, report=write_run_report)
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta == {**old, "data": "toy:dev:3", "data_rows": 3,  # the data's fingerprint added
                    "data_sha": meta["data_sha"]}
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("run", "n", "n_errors", "metrics", "cost"):  # the keys older readers use
        assert key in summary
    assert (tmp_path / "report.md").is_file() and (tmp_path / "plots" / "metrics.png").is_file()


@pytest.mark.parametrize(("change", "named"), [
    ({"lm": "embedded:qwen2.5-coder-1.5b"},
     "LM: stored 'embedded:qwen2.5-coder-0.5b', now 'embedded:qwen2.5-coder-1.5b'"),
    ({"reader": "extractive:ckpt"}, "reader: stored 'lm-reader:embedded/qwen2.5-coder-0.5b'"),
    ({"index": "bm25:wiki-bm25"}, "index: stored none, now 'bm25:wiki-bm25'"),
    ({"program_config": {"k": 3}}, 'program config: stored none, now {"k": 3}'),
    ({"artifact_sha256": "ab12"}, "artifact hash: stored none, now 'ab12'"),
    ({"metrics": ["em", "f1"]}, "metric set: stored em, now em,f1"),
    ({"judge": "lm-judge:x"}, "judge: stored none, now 'lm-judge:x'"),
])
def test_resume_refuses_other_settings_naming_each_difference(tmp_path, change, named):
    old = {**OLD_RUN_JSON, "program": "echo", "data": "toy:dev:2", "metrics": ["em"]}
    (tmp_path / "run.json").write_text(json.dumps(old))
    (tmp_path / "results.jsonl").write_text("")
    base = {"program": "echo", "data": "toy:dev:2", "metrics": ["em"],
            "reader": old["reader"], "lm": old["lm"]}
    spec = RunSpec(**{**base, **change})
    prog = EchoProgram()
    with pytest.raises(ConfigError, match="cannot resume") as err:
        evaluate(prog, _examples(2), {"em": _em}, out_dir=tmp_path, spec=spec, resume=True,
                 progress=False)
    assert named in str(err.value) and prog.calls == []
    assert json.loads((tmp_path / "run.json").read_text()) == old  # untouched


def test_resume_checks_the_index_fingerprint_once_recorded(tmp_path):
    old = {**OLD_RUN_JSON, "program": "echo", "data": "toy:dev:2", "metrics": ["em"]}
    (tmp_path / "run.json").write_text(json.dumps(old))
    same = {"program": "echo", "data": "toy:dev:2", "metrics": ["em"],
            "reader": old["reader"], "lm": old["lm"]}
    # an older run never recorded a fingerprint: accepted, and recorded from now on
    evaluate(EchoProgram(), _examples(2), {"em": _em}, out_dir=tmp_path,
             spec=RunSpec(**same, index_fingerprint="fp-1"), resume=True, progress=False,
             report=False)
    assert json.loads((tmp_path / "run.json").read_text())["index_fingerprint"] == "fp-1"
    with pytest.raises(ConfigError, match="index fingerprint: stored 'fp-1', now 'fp-2'"):
        runner_mod.check_run_dir(tmp_path, RunSpec(**same, index_fingerprint="fp-2"), True)


def test_resume_error_lists_every_difference(tmp_path):
    old = {**OLD_RUN_JSON, "program": "echo", "data": "toy:dev:2", "metrics": ["em"]}
    (tmp_path / "run.json").write_text(json.dumps(old))
    spec = RunSpec(program="echo", data="toy:dev:2", metrics=["f1"], lm="other", index="i")
    with pytest.raises(ConfigError) as err:
        runner_mod.check_run_dir(tmp_path, spec, resume=True, skip=frozenset({"reader"}))
    text = str(err.value)
    assert "LM: stored" in text and "index: stored" in text and "metric set" in text
    assert "reader" not in text.split("differ")[1].split("fix:")[0]  # skipped: not known yet


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


def test_resume_accepts_a_setting_added_later_at_its_default_only():
    """A run stored before ``answer_form`` existed behaved as the default ("long"). The
    defaults come from the caller (the API passes the program's config defaults; run_dir
    does not import the programs)."""
    from ambiqa.api.jobs import _program_defaults
    from ambiqa.evaluation.runs.runner import RunSpec, spec_differences

    defaults = _program_defaults("vanilla_rag")
    assert defaults is not None and defaults["answer_form"] == "long"
    old = {"program": "vanilla_rag", "metrics": ["str-em"], "program_config": {"k": 5}}
    same = RunSpec(program="vanilla_rag", data="asqa:dev:2", metrics=["str-em"],
                   program_config={"k": 5, "answer_form": "long"}, program_defaults=defaults)
    assert spec_differences(old, same) == []
    other = RunSpec(program="vanilla_rag", data="asqa:dev:2", metrics=["str-em"],
                    program_config={"k": 5, "answer_form": "short"}, program_defaults=defaults)
    assert spec_differences(old, other) == [
        'program config: stored {"k": 5}, now {"answer_form": "short", "k": 5}']
