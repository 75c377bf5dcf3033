"""The response cache knows what answers a call, and says when it answered (issue 42).

Before: DSPy's cache keyed on the request alone, so two endpoints serving a model of the same
name shared replies, and a run against a dead ``--api-base`` was answered from another
endpoint's cache with exit 0 and 0 tokens; nothing said an answer came from the cache.
"""

from __future__ import annotations

import socket

import dspy
import pytest

from ambiqa.errors import LMUnavailableError
from ambiqa.lm import endpoint_lm
from ambiqa.lm.factory import answer_identity, check_reachable
from ambiqa.lm.resilience import CACHE_IDENTITY_KEY, strip_cache_identity
from ambiqa.signatures.answering import ClosedBookLongAnswer
from ambiqa.testing import ScriptedEngine
from ambiqa.testing_server import serve
from ambiqa.tracing import track


@pytest.fixture()
def fresh_cache(tmp_path, monkeypatch):
    """DSPy's response cache in a temporary directory (memory and disk), restored after."""
    from dspy.clients.cache import Cache

    monkeypatch.setattr(dspy, "cache", Cache(enable_disk_cache=True, enable_memory_cache=True,
                                             disk_cache_dir=str(tmp_path / "dspy-cache")))
    return dspy.cache


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ask(lm, question: str = "Who wrote Little Women?"):
    with track() as t:
        with dspy.context(lm=lm):
            pred = dspy.Predict(ClosedBookLongAnswer)(question=question)
    return pred, t


def test_two_endpoints_with_one_model_name_do_not_share_cached_replies(fresh_cache, use_lm):
    url_a, stop_a = serve(delay=0.0)
    url_b, stop_b = serve(delay=0.0)
    try:
        lm_a = use_lm(endpoint_lm("openai/fake", api_base=url_a))
        _, first = _ask(lm_a)
        _, again = _ask(lm_a)
        assert first.cached_calls == 0 and again.cached_calls == 1 == again.lm_calls
        assert stop_a.server.served == 1       # the repeat never reached endpoint A
        lm_b = endpoint_lm("openai/fake", api_base=url_b)
        _, other = _ask(lm_b)
        assert stop_b.server.served == 1       # B was asked: A's cached reply is not B's
        assert other.cached_calls == 0 and other.summary()["cached_calls"] == 0
    finally:
        stop_a()
        stop_b()


def test_a_dead_endpoint_is_not_answered_from_another_endpoints_cache(fresh_cache, use_lm):
    url, stop = serve(delay=0.0)
    try:
        use_lm(endpoint_lm("openai/fake", api_base=url))
        _ask(dspy.settings.lm)
    finally:
        stop()
    from tests.faults.conftest import fast_policy

    dead = endpoint_lm("openai/fake", api_base=f"http://127.0.0.1:{_free_port()}/v1",
                       policy=fast_policy(max_retries=0))
    with pytest.raises(Exception) as err:
        _ask(dead)
    assert "connect" in str(err.value).lower() or "refused" in str(err.value).lower()


def test_identity_separates_what_changes_an_answer_and_holds_no_secret():
    base = answer_identity("endpoint", "openai/x", api_base="http://h:1/v1", api_key_env="K")
    assert base != answer_identity("endpoint", "openai/x", api_base="http://h:2/v1",
                                   api_key_env="K")
    assert base != answer_identity("endpoint", "openai/y", api_base="http://h:1/v1",
                                   api_key_env="K")
    assert "hunter2pass" not in answer_identity("endpoint", "openai/x",
                                                api_base="http://u:hunter2pass@h:1/v1")
    assert answer_identity("embedded", "m", output_caps=True) != \
        answer_identity("embedded", "m", output_caps=False)


def test_temperature_and_max_tokens_are_in_the_key(fresh_cache):
    engine = ScriptedEngine({"ClosedBookLongAnswer": {"long_answer": "same"}})
    lm = dspy.LM("scripted/fake", engine=engine, cache=True, num_retries=0,
                 metadata={CACHE_IDENTITY_KEY: "one"})
    _ask(lm)
    _ask(lm.copy(temperature=0.7))
    _ask(lm.copy(max_tokens=77))
    _ask(lm.copy(metadata={CACHE_IDENTITY_KEY: "two"}))
    assert len(engine.calls) == 4
    _ask(lm)
    assert len(engine.calls) == 4   # the same LM and request: the cache answers


def test_the_identity_never_reaches_the_engine_or_the_server():
    from dspy.lm15 import Config, Message, Request

    req = Request(model="m", messages=(Message.user("hi"),), config=Config(
        extensions={"metadata": {CACHE_IDENTITY_KEY: "x", "user": "kept"}}))
    out = strip_cache_identity(req)
    assert out.config.extensions == {"metadata": {"user": "kept"}}
    only = Request(model="m", messages=(Message.user("hi"),), config=Config(
        extensions={"metadata": {CACHE_IDENTITY_KEY: "x"}}))
    assert strip_cache_identity(only).config.extensions is None


def test_uncached_calls_are_not_marked(use_lm):
    from ambiqa.testing import scripted_lm

    lm = use_lm(scripted_lm({"ClosedBookLongAnswer": {"long_answer": "x"}}))
    _, t = _ask(lm)
    _, t2 = _ask(lm)
    assert t.cached_calls == t2.cached_calls == 0 and t2.lm_calls == 1


# ---- the liveness probe ----------------------------------------------------------------------
def test_probe_refuses_a_dead_endpoint_with_one_line(fresh_cache):
    lm = endpoint_lm("openai/fake", api_base=f"http://u:pw12345678@127.0.0.1:{_free_port()}/v1")
    with pytest.raises(LMUnavailableError) as err:
        check_reachable(lm, timeout_s=2)
    text = str(err.value)
    assert "does not answer" in text and "\n" not in err.value.message
    assert "pw12345678" not in text


def test_probe_refuses_an_unresolvable_host():
    lm = endpoint_lm("openai/fake", api_base="http://127.evil.invalid:9/v1")
    with pytest.raises(LMUnavailableError):
        check_reachable(lm, timeout_s=2)


def test_probe_passes_a_live_server_and_skips_what_it_need_not_probe():
    url, stop = serve(delay=0.0)
    try:
        check_reachable(endpoint_lm("openai/fake", api_base=url), timeout_s=2)
    finally:
        stop()
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    # no cache: a dead endpoint fails each question and is recorded so; nothing to hide
    check_reachable(endpoint_lm("openai/fake", api_base=dead, cache=False))
    from ambiqa.testing import scripted_lm

    check_reachable(scripted_lm({}))   # not an endpoint (the embedded path is not probed)


def test_probe_refuses_a_refused_key_and_an_html_page():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if "html" in self.path:
                body, status, kind = b"<html>login</html>", 200, "text/html"
            else:
                body, status, kind = b'{"error": "bad key"}', 401, "application/json"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        with pytest.raises(LMUnavailableError, match="401"):
            check_reachable(endpoint_lm("openai/fake", api_base=f"http://127.0.0.1:{port}/v1"))
        with pytest.raises(LMUnavailableError, match="HTML"):
            check_reachable(endpoint_lm("openai/fake",
                                        api_base=f"http://127.0.0.1:{port}/html/v1"))
    finally:
        server.shutdown()
        server.server_close()


# ---- content: null ---------------------------------------------------------------------------
def test_a_null_content_reply_is_an_lm_failure_not_an_empty_answer(use_lm):
    from dspy.utils.exceptions import LMError

    from ambiqa.programs.base import safe_step
    from tests.faults.conftest import fast_policy

    url, stop = serve(delay=0.0, faults={"null_content": 1.0})
    try:
        use_lm(endpoint_lm("openai/fake", api_base=url, cache=False,
                           policy=fast_policy(max_retries=0)))
        with track() as t, pytest.raises(LMError) as err:
            safe_step("closed_book", lambda: dspy.Predict(ClosedBookLongAnswer)(
                question="Who wrote Little Women?"), "DEGRADED")
        assert "content: null" in str(err.value)
        assert not any("degraded" in e for e in t.events)
    finally:
        stop()


def test_the_probe_can_be_switched_off_for_a_gateway_without_models(monkeypatch):
    """A gateway whose ``/models`` refuses what its chat route accepts would be refused
    forever; ``AMBIQA_NO_PROBE=1`` is the way out (named in the error's hint)."""
    lm = endpoint_lm("openai/fake", api_base=f"http://127.0.0.1:{_free_port()}/v1")
    with pytest.raises(LMUnavailableError) as err:
        check_reachable(lm, timeout_s=2)
    assert "AMBIQA_NO_PROBE=1" in str(err.value)
    monkeypatch.setenv("AMBIQA_NO_PROBE", "1")
    check_reachable(lm, timeout_s=2)
