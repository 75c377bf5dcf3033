"""Fixtures of the fault suite: fault injectors, a misbehaving HTTP endpoint, CLI runners.

Every test here carries ``pytest.mark.fault(CLASS)``; an autouse fixture writes the class (and
any ``cases`` / ``data_lost`` counts a test records) into the JUnit report, which
``benchmarks/faults.py`` turns into the fault table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fault(cls): the fault class a test belongs to "
                                       "(rows of benchmarks/results/faults.md)")


@pytest.fixture(autouse=True)
def _fault_class(request: pytest.FixtureRequest, record_property) -> None:
    marker = request.node.get_closest_marker("fault")
    record_property("fault_class", marker.args[0] if marker else "unclassified")


# ---- LM fault injection --------------------------------------------------------------------
def fast_policy(**kw: Any):
    """A retry policy with the real logic and tiny waits (tests record sleeps, not wait)."""
    from ambiqa.lm import RetryPolicy

    base = {"timeout_s": 5.0, "max_retries": 2, "base_delay_s": 0.01, "max_delay_s": 0.05}
    return RetryPolicy(**{**base, **kw})


class Faults:
    """Handlers for :func:`ambiqa.testing.scripted_lm` that misbehave the way real LMs do."""

    def __init__(self) -> None:
        self.release = threading.Event()  # frees hung calls at teardown
        self.blocked = 0                  # hung calls still waiting (event-based checks)
        self._lock = threading.Lock()

    @staticmethod
    def error(kind: str, retry_after: float | None = None) -> Exception:
        from dspy import lm15

        if kind == "timeout":
            return lm15.TimeoutError("upstream timed out", status=504)
        if kind == "builtin_timeout":
            return TimeoutError("socket read timed out")
        if kind == "connection":
            return ConnectionResetError(104, "Connection reset by peer")
        if kind == "rate_limit":
            return lm15.RateLimitError("slow down", status=429, retry_after=retry_after)
        if kind == "server":
            return lm15.ServerError("overloaded", status=503)
        if kind == "auth":
            return lm15.AuthError("invalid api key", status=401)
        raise ValueError(kind)

    def hang(self, then: dict[str, Any] | None = None) -> Callable[[dict[str, str]], Any]:
        """A handler that blocks (until teardown) -- only a deadline can end the call."""

        def handler(inputs: dict[str, str]) -> Any:
            with self._lock:
                self.blocked += 1
            self.release.wait(60)
            with self._lock:
                self.blocked -= 1
            return then or {}
        return handler

    @staticmethod
    def sequence(*items: Any) -> Callable[[dict[str, str]], Any]:
        """Handlers consumed in order, thread-safely; the last one repeats. Exceptions raise."""
        lock = threading.Lock()
        state = {"i": 0}

        def handler(inputs: dict[str, str]) -> Any:
            with lock:
                item = items[min(state["i"], len(items) - 1)]
                state["i"] += 1
            if isinstance(item, Exception):
                raise item
            return item(inputs) if callable(item) else item
        return handler


@pytest.fixture()
def faults():
    f = Faults()
    yield f
    f.release.set()


def small_passages():
    from ambiqa.types import Passage

    return [Passage(f"p{i}", f"Title {i}", text) for i, text in enumerate([
        "Rupert Grint played Ron Weasley in the Harry Potter films.",
        "Chris Rankin played Percy Weasley in the Harry Potter films.",
        "James Phelps played Fred Weasley and Oliver Phelps played George.",
        "Paris is the capital of France and its largest city.",
        "The Eiffel Tower was completed in 1889 for the World's Fair.",
        "Marie Curie won Nobel prizes in physics and chemistry.",
    ])]


# ---- a misbehaving OpenAI-compatible endpoint ---------------------------------------------
def _load_fake_server():
    from ambiqa import testing_server

    return testing_server


class FaultyEndpoint:
    """A loopback chat-completions server that answers from a script of faults.

    ``script`` items: ``"ok"`` (a correct DSPy reply), ``("429", retry_after)``, ``"503"``,
    ``("sleep", seconds)`` (then ok), ``"hang"`` (block until :meth:`close`; ``hanging``
    counts requests blocked now), ``"drop"`` (close the socket without a reply),
    ``"garbage"`` (200 with text in no adapter format), ``("huge", n_chars)``. The last item
    repeats. ``requests`` counts POSTs served.
    """

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.requests = 0
        self.hanging = 0
        self.release = threading.Event()
        self.lock = threading.Lock()
        fake = _load_fake_server()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, payload: dict, headers: dict | None = None) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer.lock:
                    item = outer.script[min(outer.requests, len(outer.script) - 1)]
                    outer.requests += 1
                kind, arg = (item if isinstance(item, tuple) else (item, None))
                if kind == "429":
                    self._json(429, {"error": {"message": "rate limited", "type": "rate"}},
                               {"Retry-After": str(arg)})
                    return
                if kind == "503":
                    self._json(503, {"error": {"message": "overloaded", "type": "server"}})
                    return
                if kind == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if kind == "sleep":
                    time.sleep(arg)
                if kind == "hang":
                    with outer.lock:
                        outer.hanging += 1
                    outer.release.wait(30)
                    with outer.lock:
                        outer.hanging -= 1
                messages = json.loads(raw or b"{}").get("messages") or []
                if kind == "garbage":
                    text = "Sure! Here is my answer, in no particular format."
                elif kind == "huge":
                    text = "A" * int(arg)
                else:
                    text = fake.make_reply(messages)
                self._json(200, {"id": "x", "object": "chat.completion", "created": 0,
                                 "model": "fake", "choices": [{
                                     "index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": text}}],
                                 "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                                           "total_tokens": 15}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        host, port = self.server.server_address[:2]
        self.url = f"http://{host}:{port}/v1"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def faulty_endpoint():
    made: list[FaultyEndpoint] = []

    def make(script: list[Any]) -> FaultyEndpoint:
        ep = FaultyEndpoint(script)
        made.append(ep)
        return ep
    yield make
    for ep in made:
        ep.close()


# ---- subprocesses --------------------------------------------------------------------------
def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """Environment for an ``ambiqa`` subprocess: the shared caches, no debug tracebacks."""
    env = dict(os.environ)
    env.pop("AMBIQA_DEBUG", None)
    env.setdefault("AMBIQA_CACHE", str(ROOT / ".ambiqa-cache"))
    env["DSPY_CACHEDIR"] = str(tmp_path / "dspy-cache")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_cli(args: list[str], env: dict[str, str], timeout: float = 120,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ambiqa.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def fake_server_url():
    """The repository's fake OpenAI-compatible server (instant replies), for subprocesses."""
    fake = _load_fake_server()
    url, shutdown = fake.serve(delay=0.0)
    yield url
    shutdown()


@pytest.fixture(scope="session")
def fault_colbert_index() -> Path:
    """A real ColBERT index over the bundled demo corpus (217 passages, ~20 s to build), kept
    in the cache so reruns reuse it. Fault tests damage copies of it, never the original."""
    import os

    from ambiqa.data import demo_corpus_path, load_corpus
    from ambiqa.errors import RetrievalIndexError
    from ambiqa.retrieval.colbert import ColBERTRetriever

    root = Path(os.environ.get("AMBIQA_CACHE", ROOT / ".ambiqa-cache")) / "test-indexes"
    name = "demo-faults"
    passages = load_corpus(demo_corpus_path())
    try:
        ColBERTRetriever.load(root, name, corpus=passages)
    except RetrievalIndexError:
        ColBERTRetriever.build(passages, index_root=root, name=name, progress=False)
    return root / name
