"""First-use work happens before ready, and says what it is doing with its duration (issue 42):
the first Diva question took 8-15 s more (the sentence encoder loading) after ``serve`` said
ready, the first ColBERT search 86 s (colbert-ai's C++ extensions), with no message.

No real model loads here: the shared encoder is replaced by a counting stand-in, and a cold
index is a small class with ColBERT's warm-up hooks (``warm``, ``is_warm``,
``warm_up_label``)."""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="ambiqa serve needs FastAPI (pip install fastapi uvicorn)")
pytest.importorskip("uvicorn", reason="ambiqa serve needs uvicorn (pip install fastapi uvicorn)")
from fastapi.testclient import TestClient

from ambiqa.cli import main
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.cache import CachedRetriever
from ambiqa.serve.app import create_app
from ambiqa.testing import HashEncoder, scripted_lm, vanilla_rag_lm

Q = "Who played Jo March in Little Women?"


class ColdIndex:
    """A retriever whose first use loads something slow, as ColBERT's searcher does."""

    name = "cold"
    warm_up_label = "the cold test index"

    def __init__(self, inner: Any, seconds: float = 0.05) -> None:
        self.inner, self.seconds, self.loads = inner, seconds, 0

    @property
    def is_warm(self) -> bool:
        return self.loads > 0

    def warm(self) -> ColdIndex:
        time.sleep(self.seconds)
        self.loads += 1
        return self

    @property
    def fingerprint(self) -> str:
        return "cold:" + self.inner.fingerprint

    def search(self, query: str, k: int = 5) -> list:
        if not self.is_warm:
            self.warm()
        return self.inner.search(query, k)

    def batch_search(self, queries: list[str], k: int = 5) -> list:
        return [self.search(q, k) for q in queries]

    def get(self, pid: str) -> Any:
        return self.inner.get(pid)


@pytest.fixture()
def shared_encoder(monkeypatch) -> list[HashEncoder]:
    """The process-wide sentence encoder replaced by a slow stand-in; the list holds each
    one "loaded" (so a test can count loads)."""
    loaded: list[HashEncoder] = []

    def get_encoder(path: Any = None) -> HashEncoder:
        if not loaded:
            time.sleep(0.05)  # the real one: sentence-transformers and the weights, 8-15 s
            loaded.append(HashEncoder())
        return loaded[0]

    monkeypatch.setattr("ambiqa.retrieval.encoder.get_encoder", get_encoder)
    monkeypatch.setattr("ambiqa.retrieval.warmup.shared_encoder_loaded", lambda: bool(loaded))
    return loaded


def _wait_ready(c: TestClient, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while c.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, c.get("/readyz").text
        time.sleep(0.01)


def test_readyz_waits_for_a_slow_warm_up(make_served, demo_retriever):
    release, started = threading.Event(), threading.Event()

    class SlowToWarm(VanillaRAG):
        def warm_up(self, say=None):
            started.set()
            say("warming up: loading a slow part ...")
            release.wait(10)
            return super().warm_up(say)

    served = make_served(vanilla_rag_lm(), program=SlowToWarm(demo_retriever, k=3))
    with TestClient(create_app(served)) as c:
        assert started.wait(10)
        r = c.get("/readyz")
        assert r.status_code == 503 and "loading a slow part" in r.json()["detail"]
        assert re.search(r"\(\d+ s so far\)", r.json()["detail"])
        answer = c.post("/v1/answer", json={"question": Q})
        assert answer.status_code == 503 and answer.headers["retry-after"]
        assert served.lm.engine.calls == []  # nothing ran before the warm-up was done
        release.set()
        _wait_ready(c)
        assert c.post("/v1/answer", json={"question": Q}).status_code == 200


def test_serve_warms_the_encoder_and_a_cold_index_before_ready_and_logs_each(
        make_served, demo_retriever, shared_encoder, caplog):
    from ambiqa.programs.diva import Diva

    cold = ColdIndex(demo_retriever)
    program = Diva(CachedRetriever(cold))  # encoder=None: the shared one, loaded on first use
    assert shared_encoder == []
    with caplog.at_level(logging.INFO, logger="ambiqa.serve"), \
            TestClient(create_app(make_served(vanilla_rag_lm(), program=program))) as c:
        _wait_ready(c)
        lines = [r.getMessage() for r in caplog.records if r.name == "ambiqa.serve"]
    # loaded once each, before ready, and bound to the program (the first question pays nothing)
    assert len(shared_encoder) == 1 and program.encoder is shared_encoder[0]
    assert cold.loads == 1
    said = "\n".join(lines)
    assert "ambiqa serve: warming up: loading the sentence encoder all-MiniLM-L6-v2 ..." in said
    assert re.search(r"warming up: the sentence encoder all-MiniLM-L6-v2 loaded \(\d+\.\d s\)",
                     said)
    assert "warming up: loading the cold test index ..." in said
    assert re.search(r"warming up: the cold test index loaded \(\d+\.\d s\)", said)
    ready = [i for i, line in enumerate(lines) if "ready (" in line]
    assert ready and all(i < ready[0] for i, line in enumerate(lines) if "warming up" in line)
    assert "warm-up" in lines[ready[0]]


def test_warm_up_is_free_when_nothing_is_cold(demo_retriever, shared_encoder):
    from ambiqa.programs.diva import Diva

    given = Diva(demo_retriever, encoder=HashEncoder())  # an encoder given: never replaced
    said: list[str] = []
    assert given.warm_up(said.append) == [] and said == []
    assert shared_encoder == []  # the shared encoder was not loaded for it
    cold = ColdIndex(demo_retriever)
    prog = Diva(cold)
    assert [s.what for s in prog.warm_up(said.append)] == [
        "the sentence encoder all-MiniLM-L6-v2", "the cold test index"]
    said.clear()
    assert prog.warm_up(said.append) == [] and said == []  # a second warm-up: nothing left
    assert Diva(cold).warm_up(said.append) == [] and said == []  # shared encoder: bound only


def test_a_part_that_fails_to_load_is_reported_and_does_not_stop_start_up(
        make_served, demo_retriever, monkeypatch, caplog):
    from ambiqa.errors import ModelError

    def missing(path: Any = None) -> Any:
        raise ModelError("all-MiniLM-L6-v2 is not installed")

    monkeypatch.setattr("ambiqa.retrieval.encoder.get_encoder", missing)
    monkeypatch.setattr("ambiqa.retrieval.warmup.shared_encoder_loaded", lambda: False)
    from ambiqa.programs.diva import Diva

    steps = Diva(demo_retriever).warm_up()
    assert len(steps) == 1 and "not installed" in steps[0].error
    # serve: a warning, and the server still turns ready (the question decides, as before)
    with caplog.at_level(logging.INFO, logger="ambiqa.serve"), TestClient(create_app(
            make_served(vanilla_rag_lm(), program=Diva(demo_retriever)))) as c:
        _wait_ready(c)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("failed after" in m and "not installed" in m and "tried again on first use" in m
               for m in warned)


def test_ask_says_what_the_first_question_loads_and_how_long_it_took(
        monkeypatch, capsys, demo_retriever):
    import dspy

    from ambiqa.cli import run_cmds
    from ambiqa.lm import configure

    cold = ColdIndex(demo_retriever)
    original = run_cmds.program_or_artifact

    def with_cold_index(args: Any, name: str) -> Any:
        program = original(args, name)
        program.retriever = cold  # closed_book holds no index: give it a cold one to load
        return program

    monkeypatch.setattr(run_cmds, "program_or_artifact", with_cold_index)
    lm = scripted_lm({"ClosedBookLongAnswer": {"long_answer": "Katharine Hepburn."}})
    monkeypatch.setattr(run_cmds, "lm_from_args", lambda args: configure(lm))
    saved = dspy.settings.lm
    try:
        code = main(["ask", Q, "--program", "closed_book", "--json"])
    finally:
        dspy.configure(lm=saved)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert cold.loads == 1
    lines = err.strip().splitlines()
    assert "ambiqa: warming up: loading the cold test index ..." in lines
    assert any(re.fullmatch(r"ambiqa: warming up: the cold test index loaded \(\d+\.\d s\)", x)
               for x in lines)
    assert "Katharine Hepburn." in out and out.lstrip().startswith("{")  # stdout: the answer


def test_evaluate_and_compile_say_what_the_first_question_loads(tmp_path, capsys,
                                                                demo_retriever):
    """`evaluate` and `compile` used to load the encoder or a ColBERT searcher in silence on
    their first question (issue 42): now each warms its program up first and says so."""
    import ambiqa
    from ambiqa.cli import build_parser
    from ambiqa.cli.eval_cmds import evaluate_from_args
    from ambiqa.data import load_dataset

    cold = ColdIndex(demo_retriever)
    args = build_parser().parse_args(["evaluate", "vanilla_rag", "--data", "demo:dev:1",
                                      "--metrics", "str-em", "--out", str(tmp_path / "run")])
    evaluate_from_args(args, lm=vanilla_rag_lm(), retriever=cold, progress=True)
    err = capsys.readouterr().err
    assert "ambiqa: warming up: loading the cold test index ..." in err
    assert re.search(r"warming up: the cold test index loaded \(\d+\.\d s\)", err)
    # evaluated after the warm-up, so the question found the index warm
    assert cold.loads == 1
    # a resume with nothing left to ask loads nothing and says no warm-up
    cold = ColdIndex(demo_retriever)
    args = build_parser().parse_args(["evaluate", "vanilla_rag", "--data", "demo:dev:1",
                                      "--metrics", "str-em", "--out", str(tmp_path / "run"),
                                      "--resume"])
    evaluate_from_args(args, lm=vanilla_rag_lm(), retriever=cold, progress=True)
    assert "warming up" not in capsys.readouterr().err
    assert cold.loads == 0

    said: list[str] = []

    class Console:
        def print(self, line: Any) -> None:
            said.append(str(line))

    cold = ColdIndex(demo_retriever)
    ambiqa.compile(VanillaRAG(cold, k=2), load_dataset("demo:train"), optimizer="labeled",
                   metric="str-em", select=False, lm=vanilla_rag_lm(), console=Console())
    assert said[0] == "warming up: loading the cold test index ..."
    assert cold.loads == 1
