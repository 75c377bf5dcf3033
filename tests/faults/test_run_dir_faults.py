"""One writer per run directory, and a resume that proves it continues the same run (issue 33
items 2, 3 and 6).

Before: two ``--resume`` runs on one ``--out`` both ran (36 rows for 20 ids, double the LM
cost); ``--max-tokens`` and ``--api-base`` were not in ``run.json``; a data row whose question
changed kept its old answer; credentials inside ``--api-base`` reached ``results.jsonl``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import dspy
import pytest

from ambiqa.errors import ConfigError
from tests.faults.conftest import _load_fake_server, cli_env, run_cli
from tests.faults.test_kill_resume import _comparable, _rows, rows_lost

pytestmark = pytest.mark.fault("Run directory")

N = 12


@pytest.fixture(scope="module")
def slow_server():
    """The fake endpoint with a delay, so a run is still working when the second arrives."""
    url, shutdown = _load_fake_server().serve(delay=0.4)
    yield url
    shutdown()


def _args(out: Path, url: str, n: int = N, *extra: str) -> list[str]:
    return ["evaluate", "closed_book", "--data", f"asqa:dev:{n}", "--metrics", "str-em,rouge-l",
            "--out", str(out), "--lm", "openai/fake", "--api-base", url, "--no-cache", *extra]


def _popen(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ambiqa.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# ---- item 2: the lock ----------------------------------------------------------------------
def test_two_concurrent_resumes_one_is_refused_with_the_holders_pid(
        tmp_path, slow_server, shared_data, record_property):
    env = cli_env(tmp_path)
    ref = tmp_path / "reference"
    assert run_cli(_args(ref, slow_server), env, timeout=300).returncode == 0
    run = tmp_path / "run"
    assert run_cli(_args(run, slow_server, 2), env, timeout=300).returncode == 0
    # both resumes start at once; whichever takes the lock first runs, the other is refused
    procs = [_popen(_args(run, slow_server, N, "--resume"), env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2], (codes, [o[1][-1500:] for o in outs])
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    err = outs[loser][1]
    assert f"is being written by pid {procs[winner].pid}" in err, err[-1500:]
    assert "Traceback" not in err
    got = _rows(run)
    lost = rows_lost(got, _comparable(ref))
    record_property("cases", 1)
    record_property("data_lost", lost)
    assert lost == 0 and len(got) == N        # no id answered twice


def test_a_killed_holder_leaves_no_stale_lock(tmp_path, slow_server, shared_data,
                                              record_property):
    env = cli_env(tmp_path)
    ref = tmp_path / "reference"
    assert run_cli(_args(ref, slow_server), env, timeout=300).returncode == 0
    run = tmp_path / "run"
    proc = _popen(_args(run, slow_server), env)
    end = time.monotonic() + 120
    while time.monotonic() < end and proc.poll() is None:
        results = run / "results.jsonl"
        if results.exists() and results.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    assert (run / ".lock").read_text().split()[0] == str(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    res = run_cli(_args(run, slow_server, N, "--resume"), env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    lost = rows_lost(_rows(run), _comparable(ref))
    record_property("data_lost", lost)
    assert lost == 0


def test_lock_is_refused_in_process_for_another_holder_and_reentrant_for_one(tmp_path):
    """The lock itself: re-entrant within a process, refused to a second one (a child)."""
    from ambiqa.evaluation.runs.run_dir import lock_run_dir

    release = lock_run_dir(tmp_path)
    again = lock_run_dir(tmp_path)          # the CLI and the runner both take it
    again()
    code = ("import sys; from ambiqa.evaluation.runs.run_dir import lock_run_dir\n"
            "try:\n    lock_run_dir(sys.argv[1])\nexcept Exception as e:\n"
            "    print(e); sys.exit(3)\n")
    child = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                           text=True, env=cli_env(tmp_path), timeout=60)
    assert child.returncode == 3 and "pid" in child.stdout
    release()
    child = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                           text=True, env=cli_env(tmp_path), timeout=60)
    assert child.returncode == 0, child.stdout + child.stderr


# ---- item 3: resume proves what changes answers --------------------------------------------
def test_resume_refuses_changed_max_tokens_and_endpoint(tmp_path, slow_server, shared_data):
    env = cli_env(tmp_path)
    run = tmp_path / "run"
    res = run_cli(_args(run, slow_server, 2, "--max-tokens", "256"), env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    stored = json.loads((run / "run.json").read_text())
    assert stored["max_tokens"] == 256 and stored["temperature"] == 0.0
    assert stored["endpoint"] == slow_server.rstrip("/")
    res = run_cli(_args(run, slow_server, 3, "--resume", "--max-tokens", "512"), env,
                  timeout=300)
    assert res.returncode == 2 and "max tokens: stored 256, now 512" in res.stderr
    other = slow_server.replace("127.0.0.1", "localhost")
    res = run_cli(_args(run, other, 3, "--resume", "--max-tokens", "256"), env, timeout=300)
    assert res.returncode == 2 and "endpoint: stored" in res.stderr, res.stderr[-1500:]
    assert len(_rows(run)) == 2                 # nothing was added by a refused resume


class _Echo:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, question: str) -> dspy.Prediction:
        self.calls.append(question)
        return dspy.Prediction(answer=question, interpretations=[], passages=[], trace={})


def _ex(i: int, text: str) -> dspy.Example:
    return dspy.Example(id=f"q{i}", question=text, answers=[text]).with_inputs("question")


def test_resume_reruns_a_row_whose_data_changed_and_names_it(tmp_path, caplog,
                                                           record_property):
    from ambiqa.evaluation.runs.runner import RunSpec, evaluate

    spec = RunSpec(program="echo", data="toy:dev:3", metrics=["em"])
    em = {"em": lambda ex, pred: float(pred.answer == ex.answers[0])}
    first = [_ex(0, "Who wrote it?"), _ex(1, "Who sang it?"), _ex(2, "Who made it?")]
    evaluate(_Echo(), first, em, out_dir=tmp_path, spec=spec, progress=False, report=False)
    edited = [first[0], _ex(1, "Who sang it first?"), first[2]]
    prog = _Echo()
    with caplog.at_level("WARNING"):
        summary = evaluate(prog, edited, em, out_dir=tmp_path, spec=spec, resume=True,
                           progress=False, report=False)
    assert prog.calls == ["Who sang it first?"]            # only the changed row, again
    assert "q1" in caplog.text and "changed in the data" in caplog.text
    from ambiqa.evaluation.runs.run_dir import ResultsFile

    rows = {r["id"]: r for r in ResultsFile(tmp_path / "results.jsonl").read()}
    stale = sum(1 for ex in edited if rows[ex.id]["question"] != ex.question)
    record_property("data_lost", stale)
    assert stale == 0 and summary["metrics"]["em"]["mean"] == 1.0


# ---- item 6: credentials in URLs -----------------------------------------------------------
def test_credentials_in_api_base_appear_nowhere(tmp_path, slow_server, shared_data):
    env = cli_env(tmp_path, AMBIQA_LM_RETRIES="0")
    secret = "sk-SECRET-4242"
    url = slow_server.replace("http://", f"http://user:{secret}@")
    run = tmp_path / "run"
    res = run_cli(_args(run, url, 2, "--max-error-rate", "1"), env, timeout=300)
    assert secret not in res.stdout + res.stderr
    written = [p for p in run.rglob("*") if p.is_file()]
    assert any(p.name == "results.jsonl" for p in written)
    for path in written:
        assert secret not in path.read_text(errors="replace"), path
    assert json.loads((run / "run.json").read_text())["endpoint"] == slow_server.rstrip("/")


def test_redact_covers_userinfo_netloc_and_query_keys():
    from ambiqa.lm.redact import endpoint_host, redact

    assert redact("http://u:KEY@h:1/v1") == "http://***@h:1/v1"
    assert redact("connect to u:KEY@127.0.0.1:9 failed") == "connect to ***@127.0.0.1:9 failed"
    assert redact("https://h/v1?api_key=KEY&x=1") == "https://h/v1?api_key=***&x=1"
    assert redact("bob@example.com said x=1") == "bob@example.com said x=1"
    assert endpoint_host("http://u:KEY@h:8/v1/?key=K") == "http://h:8/v1"


def test_config_error_is_raised_for_a_second_writer_in_the_runner(tmp_path):
    """The runner takes the lock itself (a library caller with no CLI is guarded too)."""
    from ambiqa.evaluation.runs.runner import RunSpec, evaluate

    code = ("import sys, time; from ambiqa.evaluation.runs.run_dir import lock_run_dir\n"
            "lock_run_dir(sys.argv[1]); print('held', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True, env=cli_env(tmp_path))
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"pid {holder.pid}"):
            evaluate(_Echo(), [_ex(0, "Who?")], {"em": lambda e, p: 1.0}, out_dir=tmp_path,
                     spec=RunSpec(program="echo", data="toy:dev:1", metrics=["em"]),
                     progress=False, report=False)
        assert not (tmp_path / "results.jsonl").exists()
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_log_records_are_redacted_once_an_endpoint_is_made(caplog):
    import logging

    from ambiqa.lm import endpoint_lm

    endpoint_lm("openai/fake", api_base="http://u:TOPSECRET@127.0.0.1:9/v1", cache=False)
    with caplog.at_level("WARNING"):
        logging.getLogger("litellm.fake").warning("calling %s", "http://u:TOPSECRET@h/v1")
    assert "TOPSECRET" not in caplog.text and "http://***@h/v1" in caplog.text
