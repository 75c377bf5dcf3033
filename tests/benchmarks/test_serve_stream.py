"""``benchmarks/serve_stream.py`` times a streamed answer of a real uvicorn (the LM: the fake
server streaming word by word): it sees the evidence, each answer chunk and the end."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="ambiqa serve needs FastAPI (pip install fastapi uvicorn)")
pytest.importorskip("uvicorn", reason="ambiqa serve needs uvicorn (pip install fastapi uvicorn)")

from ambiqa import testing_server
from ambiqa.data import demo_corpus_path, load_corpus
from ambiqa.lm import endpoint_lm
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.serve import ServedProgram
from ambiqa.serve.app import create_app
from tests.serve.conftest import LiveServer


def test_serve_stream_times_the_first_token_and_the_end(benchmark_script):
    bench = benchmark_script("serve_stream")
    url, shutdown = testing_server.serve(delay=0.02, chunk_delay=0.005)
    lm = endpoint_lm("openai/fake", api_base=url, cache=False)
    served = ServedProgram(program=VanillaRAG(InMemoryRetriever(load_corpus(
        demo_corpus_path())), k=3), lm=lm, artifact="t.json", lm_slots=1)
    srv = LiveServer(create_app(served)).start()
    try:
        out = bench.read_stream(srv.url, "Who wrote Hamlet?", timeout_s=60)
        refused = bench.read_stream(srv.url, "?!", timeout_s=60)
    finally:
        srv.stop()
        shutdown()
    assert out["end"] == "done" and out["answer_chunks"] > 3
    marks = out["marks"]
    assert marks["first_evidence_s"] <= marks["first_answer_s"] <= marks["first_done_s"]
    assert "".join(text for _, text in out["chunks"]) == out["answer"]
    assert out["server_stream"]["answer_chunks"] == out["answer_chunks"]
    assert out["trace"]["lm_calls"] == 2
    assert refused == {"status": 422, "detail": "question '?!' has no words"}
