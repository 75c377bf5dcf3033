"""``ambiqa serve`` as users run it: refusals before start-up, a real process answering curl
through the fake OpenAI-compatible server and a BM25 index, and graceful shutdown (a request
in flight when SIGTERM arrives still gets its answer)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time

import httpx
import pytest

pytest.importorskip("fastapi", reason="ambiqa serve needs FastAPI (pip install fastapi uvicorn)")
pytest.importorskip("uvicorn", reason="ambiqa serve needs uvicorn (pip install fastapi uvicorn)")

from ambiqa.cli import main
from ambiqa.serve.app import create_app
from ambiqa.testing import vanilla_rag_lm


def test_serve_refuses_to_start_when_it_should(tmp_path, monkeypatch, capsys):
    art = str(tmp_path / "missing.json")
    assert main(["serve", art, "--host", "0.0.0.0"]) == 2
    assert "without a token" in capsys.readouterr().err
    monkeypatch.delenv("NO_SUCH_TOKEN_VAR", raising=False)
    assert main(["serve", art, "--token-env", "NO_SUCH_TOKEN_VAR"]) == 2
    assert "NO_SUCH_TOKEN_VAR" in capsys.readouterr().err
    assert main(["serve", art]) == 2  # the artifact is checked before the port opens
    assert "artifact not found" in capsys.readouterr().err


def test_in_flight_request_finishes_when_the_server_stops(make_served, live_server):
    app = create_app(make_served(vanilla_rag_lm(delay_s=0.5), slots=2))
    srv = live_server(app)
    got: list = []
    t = threading.Thread(target=lambda: got.append(
        httpx.post(srv.url + "/v1/answer", json={"question": "Who played Jo March?"},
                   timeout=30)))
    t.start()
    admission = app.state.ambiqa["admission"]
    deadline = time.monotonic() + 10
    while admission.running == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    srv.server.should_exit = True  # what SIGTERM / Ctrl-C set
    t.join(30)
    srv.thread.join(30)
    assert got and got[0].status_code == 200 and got[0].json()["answer"]
    assert not srv.thread.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(srv.url + "/healthz", timeout=2)


def test_cli_serve_answers_curl_and_drains_on_sigterm(tmp_path):
    from ambiqa.testing_server import serve as fake_server
    from benchmarks.serve_load import build_demo_artifact, start_serve, stop

    artifact, index_root = build_demo_artifact(tmp_path)
    api_base, shutdown = fake_server(delay=0.4)
    proc = None
    try:
        proc, url, files = start_serve(
            artifact, index_root, ["--lm", "openai/fake", "--api-base", api_base, "--no-cache"],
            ["--concurrency", "2", "--timeout", "30"], tmp_path / "serve.log", ready_s=120)
        body = json.dumps({"question": "Who played Jo March in Little Women?"})
        if shutil.which("curl"):
            out = subprocess.run(["curl", "-sS", "-X", "POST", url + "/v1/answer", "-H",
                                  "Content-Type: application/json", "-d", body],
                                 capture_output=True, text=True, timeout=60, check=True)
            answer = json.loads(out.stdout)
        else:
            answer = httpx.post(url + "/v1/answer", content=body, timeout=60,
                                headers={"Content-Type": "application/json"}).json()
        assert answer["answer"].strip()
        read = {p["id"] for p in answer["passages"]}
        assert len(read) == 3 and all(i.startswith("demo-") for i in read)
        assert answer["trace"]["lm_calls"] == 2
        for it in answer["interpretations"]:
            assert set(it["passages"]) <= read | set(it["unknown_ids"])
        described = httpx.get(url + "/v1/program", timeout=10).json()
        assert described["index"]["index"] == "serve-demo-bm25"
        assert described["lm"] == "openai/fake" and described["slots"] == 2

        got: list = []
        t = threading.Thread(target=lambda: got.append(httpx.post(
            url + "/v1/answer", json={"question": "Who directed Little Women (1949)?"},
            timeout=60)))
        t.start()
        time.sleep(0.3)  # the request is in flight: two LM calls of 0.4 s each
        proc.send_signal(signal.SIGTERM)
        t.join(60)
        assert got and got[0].status_code == 200 and got[0].json()["answer"].strip()
        # uvicorn finishes the in-flight request, then re-raises SIGTERM on itself (so a
        # supervisor sees the signal): a clean drain ends with -SIGTERM, not a crash
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
        assert "Traceback" not in (tmp_path / "serve.log").read_text()
        for f in files:
            f.close()
    finally:
        if proc is not None:
            stop(proc)
        shutdown()
