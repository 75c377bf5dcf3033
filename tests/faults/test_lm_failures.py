"""An LM that gives no reply fails the question (issue 33 item 1).

A step may degrade only on what a program can answer around: a reply that does not parse.
Connection refused, timeouts, HTTP errors, empty or non-JSON bodies that survive the retries
fail the question: an error row, counted in ``failed``, scored 0 in the headline, redone by
``--retry-errors``; a run whose every question failed exits non-zero, and so does ``ask``.

Each test here failed before: the dead endpoint was a run of empty answers with ``errors=0``
and exit 0, and an endpoint failing on some calls had its questions scored as answered.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import dspy
import pytest
from dspy.utils.exceptions import LMError

from ambiqa.lm import endpoint_lm
from ambiqa.programs.base import safe_step
from ambiqa.signatures.answering import ClosedBookLongAnswer
from ambiqa.tracing import track
from tests.faults.conftest import _load_fake_server, cli_env, fast_policy, run_cli, small_passages

pytestmark = pytest.mark.fault("LM faults")

N = 6
#: every body an endpoint may send instead of a completion
MALFORMED = ("500", "html", "nonjson", "empty_choices")


def _free_port() -> int:
    with socket.socket() as s:  # bound and released: nothing listens there afterwards
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def tiny_index(tmp_path) -> Path:
    """A BM25 index over six passages (built in well under a second)."""
    from ambiqa.retrieval.bm25 import BM25Retriever

    root = tmp_path / "indexes"
    BM25Retriever.build(small_passages(), root / "tiny")
    return root


def _eval(out: Path, url: str, root: Path, *extra: str) -> list[str]:
    return ["evaluate", "vanilla_rag", "--data", f"asqa:dev:{N}", "--lm", "openai/x",
            "--api-base", url, "--no-cache", "--index", "bm25:tiny", "--index-root", str(root),
            "--metrics", "str-em,rouge-l", "--out", str(out), *extra]


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines() if x]


def _comparable(run: Path) -> dict[str, dict]:
    """The last row per id, the fields an uninterrupted run must reproduce."""
    return {r["id"]: {k: r.get(k) for k in ("question", "prediction", "error", "metrics")}
            for r in _rows(run)}


# ---- one step, every malformed body ----------------------------------------------------------
@pytest.mark.parametrize("mode", MALFORMED)
def test_each_malformed_body_fails_the_step_not_degrades(mode, use_lm):
    url, shutdown = _load_fake_server().serve(delay=0.0, faults={mode: 1.0})
    try:
        use_lm(endpoint_lm("openai/fake", api_base=url, cache=False,
                           policy=fast_policy(max_retries=1)))
        with track() as t, pytest.raises(LMError):
            safe_step("closed_book", lambda: dspy.Predict(ClosedBookLongAnswer)(
                question="Who wrote Little Women?"), "DEGRADED")
        assert not any("degraded" in e for e in t.events), t.events
        assert shutdown.server.faulted >= 1
    finally:
        shutdown()


def test_a_reply_in_no_format_still_degrades(use_lm):
    """The one fault a program answers around: the LM replied, the reply does not parse."""
    url, shutdown = _load_fake_server().serve(delay=0.0, faults={"garbage": 1.0})
    try:
        use_lm(endpoint_lm("openai/fake", api_base=url, cache=False, policy=fast_policy()))
        with track() as t:
            got = safe_step("closed_book", lambda: dspy.Predict(ClosedBookLongAnswer)(
                question="Who wrote Little Women?"), "DEGRADED")
        assert got == "DEGRADED"
        assert any(e.startswith("closed_book: degraded: AdapterParseError") for e in t.events)
    finally:
        shutdown()


def test_lm_reader_without_its_lm_fails_the_question_not_scores_zero(use_lm):
    from ambiqa.evaluation.reader import LMReader

    reader = LMReader(endpoint_lm("openai/fake", api_base=f"http://127.0.0.1:{_free_port()}/v1",
                                  cache=False, policy=fast_policy(max_retries=0)))
    with pytest.raises(LMError):
        reader.answer("Who played Ron?", "Rupert Grint played Ron Weasley.")


def test_lm_judge_without_its_lm_fails_the_question_not_says_false():
    from ambiqa.evaluation.judge import LMGroundingJudge

    judge = LMGroundingJudge(endpoint_lm(
        "openai/fake", api_base=f"http://127.0.0.1:{_free_port()}/v1", cache=False,
        policy=fast_policy(max_retries=0)))
    with pytest.raises(LMError):
        judge("Who played Ron?", "Rupert Grint", "Rupert Grint played Ron Weasley.")


# ---- the CLI -------------------------------------------------------------------------------
def test_dead_endpoint_fails_every_question_and_exits_non_zero(tmp_path, tiny_index,
                                                              shared_data, record_property):
    """The issue's command: before, exit 0 with errors=0 and six empty answers scored."""
    env = cli_env(tmp_path, AMBIQA_LM_RETRIES="0")
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    # as given: the --max-error-rate guard (default 0.5) stops the run after 4 of 4 failed
    run = tmp_path / "run"
    res = run_cli(_eval(run, dead, tiny_index), env, timeout=300)
    assert res.returncode != 0, res.stdout[-2000:]
    assert "examples failed" in res.stderr and "Traceback" not in res.stderr
    rows = _rows(run)
    assert rows and all(r["error"] and r["prediction"] is None for r in rows)
    assert f"{N - len(rows)} not run" in res.stderr
    stopped = json.loads((run / "summary.json").read_text())   # the stop still reports
    assert stopped["n"] == stopped["n_errors"] == len(rows)
    # and with the guard off, every question runs: failed = 6, exit 1
    run_all = tmp_path / "run-all"
    res = run_cli(_eval(run_all, dead, tiny_index, "--max-error-rate", "1"), env, timeout=300)
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    assert f"every one of the {N} examples failed" in res.stderr
    assert "Connection refused" in res.stderr or "connect" in res.stderr
    summary = json.loads((run_all / "summary.json").read_text())
    assert summary["n"] == N and summary["n_errors"] == N
    assert all(m["failed"] == N for m in summary["metrics"].values())
    assert f"failed={N}" in " ".join(res.stdout.split())
    passed_as_success = sum(1 for r in _rows(run_all) if not r["error"])
    record_property("cases", 2)
    record_property("data_lost", passed_as_success)
    assert passed_as_success == 0


def test_retry_errors_after_the_endpoint_returns_equals_an_uninterrupted_run(
        tmp_path, tiny_index, shared_data, record_property):
    fake = _load_fake_server()
    env = cli_env(tmp_path, AMBIQA_LM_RETRIES="0")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    run = tmp_path / "run"
    res = run_cli(_eval(run, url, tiny_index, "--max-error-rate", "1"), env, timeout=300)
    assert res.returncode == 1 and all(r["error"] for r in _rows(run))
    up, shutdown = fake.serve(delay=0.0, port=port)   # the endpoint comes back, same address
    try:
        assert up == url
        res = run_cli(_eval(run, url, tiny_index, "--resume", "--retry-errors"), env,
                      timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        ref = tmp_path / "reference"
        res = run_cli(_eval(ref, url, tiny_index), env, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
    finally:
        shutdown()
    expected, got = _comparable(ref), _comparable(run)
    assert len(expected) == N and not any(r["error"] for r in expected.values())
    lost = sum(1 for k in expected if got.get(k) != expected[k]) + len(set(got) - set(expected))
    record_property("data_lost", lost)
    assert lost == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["n"] == N and summary["n_errors"] == 0


def test_partly_failing_endpoint_fails_exactly_the_questions_it_failed(tmp_path, tiny_index,
                                                                       shared_data,
                                                                       record_property):
    """An endpoint that sends HTTP 500, HTML, non-JSON and empty ``choices`` on some calls
    (deterministic per request): every question whose call got no completion is an error
    row, none is scored as answered. Data lost = questions that met such a fault but were
    scored as success, computed by comparing with a clean run."""
    faults = {"500": 0.1, "html": 0.1, "nonjson": 0.1, "empty_choices": 0.1}
    env = cli_env(tmp_path, AMBIQA_LM_RETRIES="1")
    clean_url, stop_clean = _load_fake_server().serve(delay=0.0)
    bad_url, stop_bad = _load_fake_server().serve(delay=0.0, faults=faults)
    n = 20
    try:
        args = ["--data", f"asqa:dev:{n}", "--max-error-rate", "1"]
        clean, bad = tmp_path / "clean", tmp_path / "bad"
        base = _eval(clean, clean_url, tiny_index)
        res = run_cli([*base[:2], *args, *base[4:]], env, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        base = _eval(bad, bad_url, tiny_index)
        res = run_cli([*base[:2], *args, *base[4:]], env, timeout=300)
        assert res.returncode in (0, 1), res.stderr[-2000:]
        faulted = stop_bad.server.faulted
    finally:
        stop_clean()
        stop_bad()
    ref, got = _comparable(clean), _comparable(bad)
    assert len(ref) == len(got) == n and faulted > 0
    failed = {k for k, r in got.items() if r["error"]}
    assert failed, "no question met a fault"
    # every question that was not failed got exactly the clean run's answer: a fault never
    # passes for an answer (a degraded, different answer would show up here)
    silently_wrong = sum(1 for k in ref if k not in failed and got[k] != ref[k])
    summary = json.loads((bad / "summary.json").read_text())
    assert summary["n_errors"] == len(failed)
    record_property("cases", n)
    record_property("data_lost", silently_wrong)
    assert silently_wrong == 0


def test_ask_exits_non_zero_with_one_line_on_a_dead_endpoint(tmp_path, tiny_index):
    env = cli_env(tmp_path, AMBIQA_LM_RETRIES="0")
    res = run_cli(["ask", "Who played Ron Weasley?", "--program", "vanilla_rag", "--index",
                   "bm25:tiny", "--index-root", str(tiny_index), "--lm", "openai/x",
                   "--api-base", f"http://user:SECRETKEY@127.0.0.1:{_free_port()}/v1",
                   "--no-cache"], env, timeout=120)
    assert res.returncode == 2, res.stdout[-1000:]
    assert "Traceback" not in res.stderr
    assert "the LM gave no reply" in res.stderr
    assert "SECRETKEY" not in res.stderr + res.stdout


def test_transport_error_inside_the_json_fallback_still_fails(use_lm):
    """DSPy retries a reply that does not parse with the JSONAdapter; if that second call
    gets no reply, the step fails as a transport failure, it does not degrade as a parse
    failure (the parse error is only the context of the LM error)."""
    from ambiqa.testing import scripted_lm
    from tests.faults.conftest import Faults

    lm = use_lm(scripted_lm({"ClosedBookLongAnswer": Faults.sequence(
        "no adapter format here", Faults.error("connection"))},
        policy=fast_policy(max_retries=1), sleep=lambda s: None))
    with track() as t, pytest.raises(LMError):
        safe_step("closed_book", lambda: dspy.Predict(ClosedBookLongAnswer)(
            question="Who wrote Little Women?"), "DEGRADED")
    assert lm.engine.count("ClosedBookLongAnswer") == 3     # chat reply, JSON try + 1 retry
    assert not any("degraded" in e for e in t.events)


def test_parse_error_raised_from_an_lm_error_is_that_lm_error():
    """Should a DSPy version wrap an LM error in a parse error, it is still found."""
    from dspy.utils.exceptions import AdapterParseError, LMTransportError

    from ambiqa.signatures.answering import ShortAnswer

    cause = LMTransportError("connection refused")
    wrapped = AdapterParseError(adapter_name="ChatAdapter", signature=ShortAnswer,
                                lm_response="")
    wrapped.__cause__ = cause

    def step():
        raise wrapped
    with pytest.raises(LMTransportError) as err:
        safe_step("x", step, "DEGRADED")
    assert err.value is cause
