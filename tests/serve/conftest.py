"""Fixtures for the HTTP service: a program over the demo corpus with the scripted fake LM,
served in-process (TestClient) or by a real uvicorn on an ephemeral loopback port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ambiqa.data import demo_corpus_path, load_corpus
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.serve import ServedProgram  # the app itself (FastAPI) is imported by the tests

MANIFEST = {"program": "vanilla_rag", "program_config": {"k": 3}, "ambiqa_version": "0.1.0",
            "lm": "scripted/fake", "retriever": {"kind": "memory", "index": "demo-memory"},
            "metric": "d-f1", "optimizer": {"name": "none"}, "created": "test"}


@pytest.fixture(scope="session")
def demo_retriever() -> InMemoryRetriever:
    return InMemoryRetriever(load_corpus(demo_corpus_path()))


@pytest.fixture()
def make_served(demo_retriever) -> Callable[..., ServedProgram]:
    """``make_served(lm, slots=1, program=None)``: a ServedProgram over the demo corpus."""

    def _make(lm: Any, slots: int = 1, program: Any = None) -> ServedProgram:
        return ServedProgram(program=program or VanillaRAG(demo_retriever, k=3), lm=lm,
                             artifact="test.json", manifest=dict(MANIFEST),
                             index={"kind": "memory", "index": "demo-memory"}, lm_slots=slots)

    return _make


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """A real uvicorn serving ``app`` on 127.0.0.1 in a thread (what ``ambiqa serve`` runs)."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="on",
                                                    timeout_graceful_shutdown=30))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> LiveServer:
        import httpx

        self.thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not become ready in 30 s")

    def stop(self) -> None:
        self.server.should_exit = True  # what uvicorn's SIGTERM handler does
        self.thread.join(timeout=30)


@pytest.fixture()
def live_server() -> Iterator[Callable[[Any], LiveServer]]:
    servers: list[LiveServer] = []

    def _start(app: Any) -> LiveServer:
        srv = LiveServer(app).start()
        servers.append(srv)
        return srv

    yield _start
    for srv in servers:
        srv.stop()
