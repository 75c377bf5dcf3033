"""``POST /v1/answer/stream`` (issue 43): server-sent events read by an httpx client from a
real uvicorn, the LM being the fake OpenAI-compatible server streaming its replies word by
word: evidence first, the answer as it is written, then ``done`` (the ``/v1/answer`` body
plus the stream's timings) or ``error`` with the status ``/v1/answer`` would answer."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="ambiqa serve needs FastAPI (pip install fastapi uvicorn)")
pytest.importorskip("uvicorn", reason="ambiqa serve needs uvicorn (pip install fastapi uvicorn)")
import httpx

from ambiqa import testing_server
from ambiqa.lm import RetryPolicy, endpoint_lm
from ambiqa.serve.app import create_app
from ambiqa.testing import scripted_lm, vanilla_rag_lm

Q = "Who played Jo March in Little Women?"


@pytest.fixture()
def fake_lm():
    url, shutdown = testing_server.serve(delay=0.02, chunk_delay=0.01)
    yield endpoint_lm("openai/fake", api_base=url, cache=False)
    shutdown()


def read_sse(url: str, question: str = Q, headers: dict | None = None,
             ) -> tuple[int, list[tuple[str, dict, float]]]:
    """``(status, [(event, data, seconds since the request)])`` of one streamed answer."""
    start = time.perf_counter()
    events: list[tuple[str, dict, float]] = []
    with httpx.stream("POST", url + "/v1/answer/stream", json={"question": question},
                      headers=headers or {}, timeout=60) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, [("http", r.json(), 0.0)]
        assert r.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:]), time.perf_counter() - start))
    return 200, events


def test_stream_sends_evidence_then_the_answer_as_written_then_done(make_served, fake_lm,
                                                                    live_server):
    srv = live_server(create_app(make_served(fake_lm, slots=2)))
    status, events = read_sse(srv.url)
    assert status == 200
    names = [n for n, _, _ in events]
    assert names[0] == "evidence" and names[-1] == "done"
    assert set(names[1:-1]) == {"answer"} and len(names) - 2 > 3  # word by word
    evidence, done = events[0][1], events[-1][1]
    # the evidence is what the answer cites, with citations as /v1/answer gives them
    assert evidence["interpretations"] == done["interpretations"]
    assert evidence["passages"] == done["passages"]
    assert all(it["citations"] for it in evidence["interpretations"])
    assert "".join(d["text"] for n, d, _ in events if n == "answer") == done["answer"]
    # the chunks arrived over time, not in one burst at the end
    times = [t for n, _, t in events if n == "answer"]
    assert times[-1] - times[0] > 0.02
    # done is /v1/answer's body, plus the stream's timings
    whole = httpx.post(srv.url + "/v1/answer", json={"question": Q}, timeout=60).json()
    assert set(done) == set(whole) | {"stream"}
    assert done["answer"] == whole["answer"] and done["cached"] is False
    stream = done["stream"]
    assert stream["answer_chunks"] == names.count("answer")
    assert 0 < stream["first_chunk_s"] <= stream["total_s"]
    assert done["trace"]["stream"]["first_chunk_s"] > 0  # the program's own measure


def test_refusals_before_the_stream_are_plain_json(make_served, live_server):
    srv = live_server(create_app(make_served(vanilla_rag_lm()), token="t0k"))
    status, events = read_sse(srv.url)
    assert status == 401 and "bearer token" in events[0][1]["detail"]
    status, events = read_sse(srv.url, "?!", headers={"Authorization": "Bearer t0k"})
    assert status == 422 and "has no words" in events[0][1]["detail"]
    status, events = read_sse(srv.url, headers={"Authorization": "Bearer t0k"})
    assert status == 200 and events[-1][0] == "done"


def test_an_lm_failure_is_an_error_event_with_the_status(make_served, live_server):
    lm = scripted_lm({"ClarifyFromPassages": RuntimeError("model exploded"),
                      "WriteLongAnswer": {"long_answer": "x"}})
    srv = live_server(create_app(make_served(lm)))
    status, events = read_sse(srv.url)
    assert status == 200 and [n for n, _, _ in events] == ["error"]
    assert events[0][1]["status"] == 502 and "model exploded" in events[0][1]["detail"]
    down = ConnectionError("connection refused")
    lm = scripted_lm({"ClarifyFromPassages": down, "WriteLongAnswer": down},
                     policy=RetryPolicy(timeout_s=5, max_retries=0), sleep=lambda s: None)
    srv = live_server(create_app(make_served(lm)))
    status, events = read_sse(srv.url)
    assert events[-1][0] == "error" and events[-1][1]["status"] == 503


def test_the_deadline_is_an_error_event(make_served, live_server):
    srv = live_server(create_app(make_served(vanilla_rag_lm(delay_s=0.8)), timeout_s=0.3))
    status, events = read_sse(srv.url)
    assert events[-1][0] == "error" and events[-1][1]["status"] == 504


def test_a_full_queue_is_503_before_the_stream(make_served, live_server):
    app = create_app(make_served(vanilla_rag_lm(delay_s=0.6), slots=1), queue=0)
    srv = live_server(app)
    first: list = []
    t = threading.Thread(target=lambda: first.append(read_sse(srv.url)))
    t.start()
    deadline = time.monotonic() + 10
    while app.state.ambiqa["admission"].running == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    status, events = read_sse(srv.url, "Who wrote Little Women?")
    t.join()
    assert status == 503 and "busy" in events[0][1]["detail"]
    assert first[0][1][-1][0] == "done"


def test_stream_is_documented(make_served):
    from fastapi.testclient import TestClient

    with TestClient(create_app(make_served(vanilla_rag_lm()))) as c:
        spec = c.get("/openapi.json").json()
    route = spec["paths"]["/v1/answer/stream"]["post"]
    assert "text/event-stream" in route["responses"]["200"]["content"]
