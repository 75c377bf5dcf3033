"""A real OpenAI-compatible server as the LM: the embedded 0.5B GGUF behind llama.cpp's own
HTTP server (xllamacpp's ``Server``, in a separate process), reached only through
``--lm openai/... --api-base``, runs a program end to end."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from ambiqa.cli import main
from ambiqa.data import demo_corpus_path

pytestmark = pytest.mark.integration

MODEL = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="module")
def llama_server():
    from benchmarks.llama_server import ServerProcess

    try:
        server = ServerProcess(MODEL, slots=2, threads=2)
    except Exception as exc:  # model parts or xllamacpp not installed
        pytest.skip(f"llama.cpp server unavailable: {exc}")
    yield server
    server.stop()


def test_server_refuses_requests_without_its_key(llama_server):
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 4}).encode()
    req = urllib.request.Request(llama_server.api_base + "/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=60)
    assert err.value.code == 401


def test_vanilla_rag_end_to_end_through_the_llama_cpp_server(llama_server, tmp_path,
                                                             monkeypatch):
    monkeypatch.setenv("LLAMA_SERVER_API_KEY", llama_server.key)
    # a loaded CI machine can take minutes per call on two cores: wait, do not retry
    monkeypatch.setenv("AMBIQA_LM_TIMEOUT", "900")
    monkeypatch.setenv("AMBIQA_LM_RETRIES", "0")
    root = str(tmp_path / "indexes")
    assert main(["index", str(demo_corpus_path()), "--name", "demo-bm25", "--kind", "bm25",
                 "--index-root", root]) == 0
    out = tmp_path / "run"
    rc = main(["evaluate", "vanilla_rag", "--data", "demo:dev:1", "--metrics",
               "str-em,rouge-l", "--out", str(out), "--index", "bm25:demo-bm25",
               "--index-root", root, "--lm", f"openai/{MODEL}", "--api-base",
               llama_server.api_base, "--api-key-env", "LLAMA_SERVER_API_KEY", "--no-cache"])
    assert rc == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    for row in rows:
        assert row["error"] is None, row["error"]
        assert row["cost"]["lm_calls"] >= 1 and row["cost"]["output_tokens"] > 0
        pred = row["prediction"]
        assert pred["passages"], "the program read no passages"
        assert str(pred.get("answer") or "").strip(), "the server's model wrote no answer"
    meta = json.loads((out / "run.json").read_text())
    assert meta["lm"] == f"openai/{MODEL}"
    assert llama_server.key not in (out / "run.json").read_text()
