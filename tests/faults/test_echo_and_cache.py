"""Issue 42: an endpoint that echoes the API key, a cache that answered for a dead endpoint,
and the silent successes left (``content: null``, an empty data file, ``nan``/``inf``
timeouts).

Each probe failed before: the echoed key was written verbatim into results.jsonl,
summary.json, report.md/html and stderr, returned in serve's 502 body and logged; an
``evaluate`` against a dead ``--api-base`` was answered 8 of 8 from another endpoint's cache
(exit 0, 0 tokens); a ``content: null`` reply scored as an empty answer; an empty data file
gave metrics ``nan`` with exit 0; ``--timeout-s nan`` was accepted.
"""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import pytest

from ambiqa.testing_server import serve
from tests.faults.conftest import cli_env, run_cli

pytestmark = pytest.mark.fault("LM faults")
security = pytest.mark.fault("Artifacts / security")

SECRET = "sk-echo-4f9d2c1b8a7e6d5c"
QUESTIONS = [{"question": "Who wrote Little Women?", "answers": ["Louisa May Alcott"]},
             {"question": "What is the capital of France?", "answers": ["Paris"]}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _data(tmp_path: Path, rows: list[dict] | None = None) -> Path:
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (QUESTIONS if rows is None
                                                             else rows)), encoding="utf-8")
    return path


def _leaks(root: Path, *texts: str) -> list[str]:
    """Where the secret appears: files under ``root`` and the given texts."""
    found = [str(p) for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    return found + [f"text {i}" for i, t in enumerate(texts) if SECRET in t]


# ---- secrets never echo ----------------------------------------------------------------------
@security
@pytest.mark.parametrize("mode", ["auth_echo", "500_echo"])
def test_an_echoed_key_reaches_no_row_summary_report_or_stderr(tmp_path, mode,
                                                               record_property):
    url, stop = serve(delay=0.0, faults={mode: 1.0})
    env = cli_env(tmp_path, AMBIQA_FAKE_KEY=SECRET, AMBIQA_LM_RETRIES="0")
    run = tmp_path / "run"
    try:
        res = run_cli(["evaluate", "closed_book", "--data", f"jsonl:{_data(tmp_path)}",
                       "--out", str(run), "--max-error-rate", "1", "--lm", "openai/fake",
                       "--api-base", url, "--api-key-env", "AMBIQA_FAKE_KEY"], env, timeout=180)
        assert stop.server.faulted >= len(QUESTIONS)   # the key really was echoed
    finally:
        stop()
    assert res.returncode == 1, res.stderr[-1500:]       # every question failed: counted
    rows = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    assert len(rows) == len(QUESTIONS) and all(r["error"] for r in rows)
    assert all("Incorrect API key provided: ***" in r["error"] for r in rows), rows[0]["error"]
    for name in ("summary.json", "report.md", "report.html"):
        assert (run / name).is_file(), name
    leaks = _leaks(tmp_path, res.stdout, res.stderr)
    record_property("cases", 5)
    record_property("data_lost", len(leaks))
    assert leaks == []


@security
def test_an_echoed_key_is_not_in_asks_error_line(tmp_path):
    url, stop = serve(delay=0.0, faults={"auth_echo": 1.0})
    env = cli_env(tmp_path, AMBIQA_FAKE_KEY=SECRET, AMBIQA_LM_RETRIES="0")
    try:
        res = run_cli(["ask", "Who wrote Emma?", "--program", "closed_book", "--lm",
                       "openai/fake", "--api-base", url, "--api-key-env", "AMBIQA_FAKE_KEY"],
                      env, timeout=120)
    finally:
        stop()
    assert res.returncode == 2, res.stdout[-800:] + res.stderr[-800:]
    assert "Traceback" not in res.stderr and "the LM gave no reply" in res.stderr
    assert _leaks(tmp_path, res.stdout, res.stderr) == []


@security
def test_an_echoed_key_is_not_in_serves_502_body_or_its_log(make_served_endpoint, caplog):
    from fastapi.testclient import TestClient

    from ambiqa.serve.app import create_app

    served = make_served_endpoint({"auth_echo": 1.0})
    with caplog.at_level(logging.INFO), TestClient(create_app(served)) as client:
        r = client.post("/v1/answer", json={"question": "Who played Ron Weasley?"})
    assert r.status_code in (502, 503), r.text
    assert "***" in r.json()["detail"] and SECRET not in r.text
    logged = "\n".join(rec.getMessage() + (rec.exc_text or "") for rec in caplog.records)
    assert "answer failed" in logged and SECRET not in logged


@security
def test_debug_tracebacks_and_url_passwords_are_redacted(tmp_path):
    """``AMBIQA_DEBUG=1`` printed Python's own traceback, with the URL's password in it."""
    env = cli_env(tmp_path, AMBIQA_DEBUG="1", AMBIQA_LM_RETRIES="0")
    res = run_cli(["ask", "Who wrote Emma?", "--program", "closed_book", "--lm", "openai/fake",
                   "--api-base", f"http://user:pw-{SECRET}@127.0.0.1:{_free_port()}/v1"],
                  env, timeout=120)
    assert res.returncode != 0
    assert "Traceback" in res.stderr and "LMUnavailableError" in res.stderr
    assert SECRET not in res.stderr + res.stdout


@security
def test_redact_removes_known_keys_and_url_passwords(monkeypatch):
    from ambiqa.lm.redact import MASK, redact, register_secret

    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-value-123456")
    monkeypatch.setenv("SOME_PROVIDER_API_KEY", "pk-other-value-987")
    register_secret("registered-token-0001")
    register_secret("short")       # too short to be a key: never masked
    text = ("401: Incorrect API key provided: sk-env-value-123456; other pk-other-value-987 "
            "token registered-token-0001 at http://u:pass1234@h/v1?api_key=q1w2e3 short")
    out = redact(text)
    for secret in ("sk-env-value-123456", "pk-other-value-987", "registered-token-0001",
                   "pass1234", "q1w2e3"):
        assert secret not in out
    assert out.count(MASK) == 5 and out.endswith("short")
    assert redact(out) == out     # idempotent


@security
def test_a_key_cut_at_a_length_limit_is_still_masked(monkeypatch):
    """Texts are cut to a length after redaction, never before: a key cut in two no longer
    matches its value, and its first half would be printed."""
    from dspy import lm15

    from ambiqa.lm.failures import lm_unavailable
    from ambiqa.lm.redact import register_secret
    from ambiqa.serve.app import _lm_error_status

    register_secret(SECRET)
    for pad in (185, 195, 285, 295):
        exc = lm15.AuthError("x" * pad + " " + SECRET, status=401)
        texts = [_lm_error_status(exc)[1], str(lm_unavailable("step", exc))]
        assert not any(SECRET[:6] in t for t in texts), (pad, texts)


# ---- the cache never hides a dead endpoint ---------------------------------------------------
def test_a_cached_run_against_a_dead_endpoint_is_refused_and_cached_answers_are_marked(
        tmp_path, record_property):
    """The issue's probe: the cache on (the default), a first run fills it, then the same
    command against a dead ``--api-base``. Before: exit 0, errors 0, answered from the cache."""
    env = cli_env(tmp_path)
    data = _data(tmp_path)
    url, stop = serve(delay=0.0)
    try:
        args = ["evaluate", "closed_book", "--data", f"jsonl:{data}", "--lm", "openai/fake"]
        first = run_cli([*args, "--out", str(tmp_path / "one"), "--api-base", url], env,
                        timeout=180)
        assert first.returncode == 0, first.stderr[-1500:]
        again = run_cli([*args, "--out", str(tmp_path / "two"), "--api-base", url], env,
                        timeout=180)
        assert again.returncode == 0, again.stderr[-1500:]
        # ask: the same prompt as the run's first question, so its answer is the cached one
        asked = run_cli(["ask", QUESTIONS[0]["question"], "--program", "closed_book", "--lm",
                         "openai/fake", "--api-base", url], env, timeout=120)
        assert asked.returncode == 0, asked.stderr[-1500:]
        assert "from the response cache" in " ".join(asked.stdout.split())
    finally:
        stop()
    # the repeat was answered from the cache, and every output says so
    rows = [json.loads(x) for x in (tmp_path / "two" / "results.jsonl").read_text().splitlines()]
    assert all(r["cost"]["cached_calls"] >= 1 for r in rows)
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["cached"]["examples"] == len(QUESTIONS)
    assert "from the response cache" in (tmp_path / "two" / "report.md").read_text()
    assert "from the response cache" in " ".join(again.stdout.split())
    fresh = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert fresh["cached"] == {"examples": 0, "calls": 0}
    # the endpoint is gone: refused with one line before any question, nothing written
    dead = run_cli([*args, "--out", str(tmp_path / "dead"), "--api-base", url], env,
                   timeout=120)
    assert dead.returncode == 2, dead.stdout[-1000:]
    assert "does not answer" in dead.stderr and "Traceback" not in dead.stderr
    assert not (tmp_path / "dead" / "results.jsonl").exists()
    # ask the same way
    ask = run_cli(["ask", QUESTIONS[0]["question"], "--program", "closed_book", "--lm",
                   "openai/fake", "--api-base", url], env, timeout=120)
    assert ask.returncode == 2 and "does not answer" in ask.stderr
    record_property("cases", 2)
    record_property("data_lost", 0)


def test_serve_refuses_to_become_ready_in_front_of_a_dead_endpoint(tmp_path, monkeypatch):
    from ambiqa.errors import LMUnavailableError
    from ambiqa.serve.loading import load_served

    artifact = tmp_path / "art.json"
    artifact.write_text("{}", encoding="utf-8")
    with pytest.raises(LMUnavailableError, match="does not answer"):
        load_served(artifact, lm_spec="openai/fake",
                    api_base="http://127.evil.invalid:9/v1")


def test_a_served_answer_says_when_it_came_from_the_cache(make_served_endpoint, tmp_path,
                                                          monkeypatch):
    import dspy
    from dspy.clients.cache import Cache
    from fastapi.testclient import TestClient

    from ambiqa.serve.app import create_app

    monkeypatch.setattr(dspy, "cache", Cache(enable_disk_cache=False, enable_memory_cache=True,
                                             disk_cache_dir=str(tmp_path / "c")))
    served = make_served_endpoint({}, cache=True)
    with TestClient(create_app(served)) as client:
        first = client.post("/v1/answer", json={"question": "Who played Ron Weasley?"})
        again = client.post("/v1/answer", json={"question": "Who played Ron Weasley?"})
    assert first.status_code == again.status_code == 200, first.text
    assert first.json()["cached"] is False and first.json()["trace"]["cached_calls"] == 0
    assert again.json()["cached"] is True and again.json()["trace"]["cached_calls"] >= 1


@pytest.fixture()
def make_served_endpoint(monkeypatch, request):
    """``make(faults, cache=False)``: a ServedProgram whose LM is an endpoint LM (key in
    ``$AMBIQA_FAKE_KEY``) on a fake server with those faults."""
    from ambiqa.data import demo_corpus_path, load_corpus
    from ambiqa.lm import endpoint_lm
    from ambiqa.programs.vanilla_rag import VanillaRAG
    from ambiqa.retrieval.base import InMemoryRetriever
    from ambiqa.serve import ServedProgram
    from tests.faults.conftest import fast_policy

    monkeypatch.setenv("AMBIQA_FAKE_KEY", SECRET)
    stops = []

    def make(faults, cache: bool = False):
        url, stop = serve(delay=0.0, faults=faults)
        stops.append(stop)
        lm = endpoint_lm("openai/fake", api_base=url, api_key_env="AMBIQA_FAKE_KEY",
                         cache=cache, policy=fast_policy(max_retries=0))
        program = VanillaRAG(InMemoryRetriever(load_corpus(demo_corpus_path())), k=3)
        return ServedProgram(program=program, lm=lm, artifact="test.json",
                             manifest={"program": "vanilla_rag"}, lm_slots=1)

    yield make
    for stop in stops:
        stop()


# ---- silent successes ------------------------------------------------------------------------
def test_null_content_replies_are_counted_failures_not_empty_answers(tmp_path,
                                                                    record_property):
    url, stop = serve(delay=0.0, faults={"null_content": 1.0})
    env = cli_env(tmp_path, AMBIQA_LM_RETRIES="0")
    run = tmp_path / "run"
    try:
        res = run_cli(["evaluate", "closed_book", "--data", f"jsonl:{_data(tmp_path)}",
                       "--out", str(run), "--max-error-rate", "1", "--no-cache", "--lm",
                       "openai/fake", "--api-base", url], env, timeout=180)
    finally:
        stop()
    assert res.returncode == 1, res.stderr[-1500:]
    rows = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    scored_as_answered = sum(1 for r in rows if not r["error"])
    record_property("data_lost", scored_as_answered)
    assert scored_as_answered == 0 and "content: null" in rows[0]["error"]


def test_an_empty_data_file_is_a_one_line_error_not_nan(tmp_path):
    env = cli_env(tmp_path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    res = run_cli(["evaluate", "closed_book", "--data", f"jsonl:{empty}", "--out",
                   str(tmp_path / "run"), "--lm", "openai/fake", "--api-base",
                   f"http://127.0.0.1:{_free_port()}/v1"], env, timeout=120)
    assert res.returncode == 2, res.stdout[-1000:]
    first = res.stderr.strip().splitlines()[0]    # the error line (a "fix:" hint may follow)
    assert first.startswith("ambiqa: error:") and "no examples" in first, res.stderr
    assert "nan" not in res.stdout and "Traceback" not in res.stderr
    assert not (tmp_path / "run" / "summary.json").exists()


@pytest.mark.parametrize("argv", [
    ["evaluate", "closed_book", "--data", "demo:dev:1", "--out", "r", "--timeout-s", "nan"],
    ["evaluate", "closed_book", "--data", "demo:dev:1", "--out", "r", "--timeout-s", "inf"],
    ["evaluate", "closed_book", "--data", "demo:dev:1", "--out", "r", "--timeout-s=-inf"],
    ["serve", "art.json", "--timeout", "inf"],
    ["serve", "art.json", "--timeout", "nan"],
], ids=["eval-nan", "eval-inf", "eval-minus-inf", "serve-inf", "serve-nan"])
def test_non_finite_timeouts_are_refused_while_parsing(argv, capsys):
    from ambiqa.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "finite number of seconds" in err and "Traceback" not in err
    assert len([ln for ln in err.splitlines() if "error:" in ln]) == 1


def test_the_api_refuses_non_finite_timeouts_too():
    from ambiqa.api import EvaluateSettings
    from ambiqa.errors import ConfigError

    for bad in (float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="finite"):
            EvaluateSettings(timeout_s=bad).check()
