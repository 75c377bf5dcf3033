"""Two `ambiqa tune` workers share one Optuna study on a real PostgreSQL server (fake LM):
one is SIGKILLed mid-trial and restarted. No trial number is used twice, no trial finished
before the kill is lost or changed, the study stops at --trials (give or take the trial
another worker had in flight), and there is one best artifact: the study's best trial."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.scale.conftest import cli_env, load_fake_server

TRIALS = 6


@pytest.fixture(scope="module")
def slow_endpoint():
    """The fake endpoint with a delay, so a trial takes a while and a kill lands inside one."""
    url, shutdown = load_fake_server().serve(delay=0.2)
    yield url
    shutdown()


def _tune_args(storage: str, study: str, out: Path, url: str) -> list[str]:
    return [sys.executable, "-m", "ambiqa.cli", "tune", "closed_book", "--study", study,
            "--storage", storage, "--trials", str(TRIALS), "--train", "demo:train",
            "--metric", "rouge-l", "--n-val", "3", "--out", str(out), "--lm", "openai/fake",
            "--api-base", url, "--no-cache"]


class _Worker:
    """One `ambiqa tune` process whose stdout lines are collected as they come."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in iter(self.proc.stdout.readline, ""):
            self.lines.append(line)

    @property
    def completed(self) -> int:
        return sum(": complete value" in ln for ln in self.lines)

    def wait(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return rc

    def result(self) -> dict:
        for line in reversed(self.lines):
            if line.startswith("{"):
                return json.loads(line)
        raise AssertionError("no result line:\n" + "".join(self.lines[-40:]))


def test_two_workers_one_killed_mid_trial_and_restarted(pg_url, slow_endpoint, tmp_path,
                                                        record_property):
    import optuna

    from ambiqa.optimizers.artifact import read_artifact
    from ambiqa.optimizers.tune import make_storage

    study_name = f"pg-{uuid.uuid4().hex[:10]}"
    out_dir = tmp_path / "artifacts"
    out_dir.mkdir()
    out = out_dir / "best.json"  # both workers write the best trial here (atomically)
    env = cli_env(tmp_path)
    args = _tune_args(pg_url, study_name, out, slow_endpoint)
    RUNNING = optuna.trial.TrialState.RUNNING
    COMPLETE = optuna.trial.TrialState.COMPLETE
    storage = make_storage(pg_url)  # the driver ambiqa picks for a bare postgresql:// URL

    def trials() -> list:
        try:
            return optuna.load_study(study_name=study_name, storage=storage).get_trials(
                deepcopy=False)
        except KeyError:  # the study is not created yet
            return []

    a, b = _Worker(args, env), _Worker(args, env)
    try:
        # kill A once it finished a trial and both workers are inside one (2 RUNNING)
        deadline = time.monotonic() + 240
        mid_trial = False
        while time.monotonic() < deadline and a.proc.poll() is None:
            running = sum(t.state == RUNNING for t in trials())
            if a.completed >= 1 and running >= 2:
                mid_trial = True
                break
            time.sleep(0.05)
        assert mid_trial and a.proc.poll() is None, (
            "the kill did not land mid-trial:\n" + "".join(a.lines[-30:]))
        a.proc.send_signal(signal.SIGKILL)
        a.wait(timeout=30)
        before = {t.number: (t.value, t.params) for t in trials() if t.state == COMPLETE}
        assert len(before) < TRIALS, "the study finished before the kill"

        a2 = _Worker(args, env)  # the same command again
        assert a2.wait(timeout=400) == 0, "".join(a2.lines[-40:])
        assert b.wait(timeout=400) == 0, "".join(b.lines[-40:])
    finally:
        for w in (a, b):
            if w.proc.poll() is None:
                w.proc.kill()

    final = trials()
    numbers = [t.number for t in final]
    assert len(numbers) == len(set(numbers)), f"duplicated trial numbers: {numbers}"
    assert sorted(numbers) == list(range(len(numbers)))
    after = {t.number: (t.value, t.params) for t in final if t.state == COMPLETE}
    lost = sum(1 for n, v in before.items() if after.get(n) != v)
    record_property("data_lost", lost)
    assert lost == 0, f"{lost} trials finished before the kill were lost or changed"
    # the killed worker's trial stays RUNNING until Optuna's heartbeat marks it FAIL; it is
    # never counted, never renumbered, never run twice
    unfinished = [t.number for t in final if t.state not in (COMPLETE,
                                                             optuna.trial.TrialState.PRUNED)]
    assert len(unfinished) == 1, unfinished
    # the study stops at --trials; the other worker may finish the trial it had in flight
    assert TRIALS <= len(after) <= TRIALS + 1, len(after)
    # one best artifact, complete, naming the study's best trial, and nothing torn beside it
    assert [p.name for p in out_dir.iterdir()] == ["best.json"]
    study = optuna.load_study(study_name=study_name, storage=storage)
    manifest = read_artifact(out)["manifest"]
    assert manifest["optuna"]["trial"] == study.best_trial.number
    assert manifest["optuna"]["value"] == pytest.approx(study.best_value)
    assert manifest["optuna"]["storage"].startswith("postgresql://")
    assert a2.result()["best_trial"] == b.result()["best_trial"] == study.best_trial.number
