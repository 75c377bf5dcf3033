"""The answer service in-process (TestClient runs the app's lifespan): payload, validation,
admission (queue full, deadline), LM failures, auth, readiness, the program description."""

from __future__ import annotations

import threading
import time

import dspy
import pytest

pytest.importorskip("fastapi", reason="ambiqa serve needs FastAPI (pip install fastapi uvicorn)")
pytest.importorskip("uvicorn", reason="ambiqa serve needs uvicorn (pip install fastapi uvicorn)")
from fastapi.testclient import TestClient

from ambiqa.errors import ConfigError
from ambiqa.lm import RetryPolicy
from ambiqa.serve.app import check_bind, create_app
from ambiqa.testing import scripted_lm, titles_as_answers, vanilla_rag_lm

Q = "Who played Jo March in Little Women?"


def _client(served, **kw) -> TestClient:
    return TestClient(create_app(served, **kw))


def test_answer_has_interpretations_citations_passages_and_trace(make_served):
    with _client(make_served(vanilla_rag_lm())) as c:
        r = c.post("/v1/answer", json={"question": Q})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"].startswith("Answers: ")
    read = {p["id"]: p for p in body["passages"]}
    assert len(read) == 3
    assert len(body["interpretations"]) == 2
    for it in body["interpretations"]:
        # titles_as_answers: the answer is the cited passage's title
        assert it["passages"] and set(it["passages"]) <= set(read)
        cite = it["citations"][0]
        assert cite["title"] == read[cite["id"]]["title"] == it["answer"]
        assert cite["supporting_sentence"] and cite["supporting_sentence"] in cite["text"]
        assert it["unknown_ids"] == []
    assert body["trace"]["lm_calls"] == 2
    assert body["trace"]["calls_by_module"] == {"ClarifyFromPassages": 1, "WriteLongAnswer": 1}
    assert body["trace"]["retriever_calls"] == 1


def test_program_without_async_path_runs_in_a_worker_thread(make_served, demo_retriever):
    from ambiqa.programs.vanilla_rag import VanillaRAG

    threads: list[str] = []

    class SyncOnly(dspy.Module):  # a user's module: no aforward
        def __init__(self) -> None:
            super().__init__()
            self.inner = VanillaRAG(demo_retriever, k=3)

        def forward(self, question: str):
            threads.append(threading.current_thread().name)
            return self.inner(question=question)

    served = make_served(vanilla_rag_lm(), program=SyncOnly())
    with _client(served) as c:
        assert c.get("/v1/program").json()["has_async_path"] is False
        r = c.post("/v1/answer", json={"question": Q})
    assert r.status_code == 200, r.text
    assert r.json()["trace"]["lm_calls"] == 2  # the LM and tracing reached the worker thread
    assert threads and threads[0].startswith("ambiqa-serve")


def test_async_path_is_used_when_the_program_has_one(make_served, monkeypatch):
    from ambiqa.programs.vanilla_rag import VanillaRAG

    seen = []
    original = VanillaRAG.aforward

    async def spy(self, question):
        seen.append(question)
        return await original(self, question)

    monkeypatch.setattr(VanillaRAG, "aforward", spy)
    with _client(make_served(vanilla_rag_lm())) as c:
        assert c.get("/v1/program").json()["has_async_path"] is True
        assert c.post("/v1/answer", json={"question": Q}).status_code == 200
    assert seen == [Q]


@pytest.mark.parametrize(("body", "reason"), [
    ({"question": ""}, "question is empty"),
    ({"question": "   \n"}, "question is empty"),
    ({"question": "?!"}, "has no words"),
    ({"question": "x" * 2001}, "the limit is 2000"),
    ({"question": 42}, "question must be text, got a number"),
    ({"question": ["a"]}, "question must be text, got a list"),
    ({"question": None}, "question must be text, got null"),
    ({}, "question is missing"),
    ({"question": "q?", "k": 3}, "unknown field 'k'"),
    ([1], "body must be"),
])
def test_bad_questions_get_422_with_one_line_reason(make_served, body, reason):
    served = make_served(vanilla_rag_lm())
    with _client(served) as c:
        r = c.post("/v1/answer", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and reason in detail
    assert served.lm.engine.calls == []  # refused before any LM call


def test_invalid_json_and_oversized_bodies(make_served):
    with _client(make_served(vanilla_rag_lm())) as c:
        r = c.post("/v1/answer", content=b"{not json", headers={"content-type":
                                                                "application/json"})
        assert r.status_code == 422 and "not valid JSON" in r.json()["detail"]
        big = b'{"question": "' + b"a" * 70_000 + b'"}'
        r = c.post("/v1/answer", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413

        def chunked():  # no Content-Length: counted as it arrives
            yield b'{"question": "'
            for _ in range(10):
                yield b"a" * 10_000
            yield b'"}'

        r = c.post("/v1/answer", content=chunked(), headers={"content-type":
                                                             "application/json"})
        assert r.status_code == 413 and "over 65536 bytes" in r.json()["detail"]
        assert c.post("/v1/answer", json={"question": Q}).status_code == 200


def test_full_queue_gets_503_with_retry_after(make_served):
    lm = vanilla_rag_lm(delay_s=0.6)
    app = create_app(make_served(lm, slots=1), queue=0)
    with TestClient(app) as c:
        first: list = []
        t = threading.Thread(target=lambda: first.append(
            c.post("/v1/answer", json={"question": Q})))
        t.start()
        state = app.state.ambiqa
        deadline = time.monotonic() + 10
        while (state["admission"] is None or state["admission"].running == 0) and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        r = c.post("/v1/answer", json={"question": "Who wrote Little Women?"})
        t.join()
        assert r.status_code == 503
        assert int(r.headers["retry-after"]) >= 1
        assert "busy" in r.json()["detail"]
        assert first[0].status_code == 200
        assert state["admission"].refused == 1


def test_queued_requests_wait_for_a_slot_and_all_finish(make_served):
    app = create_app(make_served(vanilla_rag_lm(delay_s=0.2), slots=1), queue=4)
    with TestClient(app) as c:
        out: list = []
        threads = [threading.Thread(target=lambda i=i: out.append(
            c.post("/v1/answer", json={"question": f"Who directed film {i}?"})))
            for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.status_code for r in out] == [200, 200, 200]
        assert c.get("/readyz").json()["served"] == 3


def test_deadline_gets_504_and_the_slot_is_held_until_the_call_ends(make_served):
    app = create_app(make_served(vanilla_rag_lm(delay_s=0.8), slots=1), timeout_s=0.3)
    with TestClient(app) as c:
        t0 = time.monotonic()
        r = c.post("/v1/answer", json={"question": Q})
        assert r.status_code == 504 and "0.3 s" in r.json()["detail"]
        assert time.monotonic() - t0 < 0.8
        admission = app.state.ambiqa["admission"]
        assert admission.running == 1  # the abandoned call still holds the LM slot
        deadline = time.monotonic() + 10
        while admission.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert admission.running == 0


def test_lm_error_is_502_never_an_empty_200(make_served):
    lm = scripted_lm({"ClarifyFromPassages": RuntimeError("model exploded"),
                      "WriteLongAnswer": {"long_answer": "x"}})
    with _client(make_served(lm)) as c:
        r = c.post("/v1/answer", json={"question": Q})
    assert r.status_code == 502
    assert "the LM failed" in r.json()["detail"] and "model exploded" in r.json()["detail"]


def test_unreachable_lm_is_503_not_a_degraded_empty_answer(make_served):
    down = ConnectionError("connection refused")
    lm = scripted_lm({"ClarifyFromPassages": down, "WriteLongAnswer": down},
                     policy=RetryPolicy(timeout_s=5, max_retries=1, base_delay_s=0.0),
                     sleep=lambda s: None)
    with _client(make_served(lm)) as c:
        r = c.post("/v1/answer", json={"question": Q})
    assert r.status_code == 503
    assert "no answer" in r.json()["detail"] and "LM unavailable" in r.json()["detail"]
    assert "retry-after" in r.headers


def test_degraded_steps_with_no_answer_are_502_and_a_fallback_answer_is_200(make_served):
    garbage = "no fields here at all"
    lm = scripted_lm({"ClarifyFromPassages": garbage, "WriteLongAnswer": garbage})
    with _client(make_served(lm)) as c:
        r = c.post("/v1/answer", json={"question": Q})
    assert r.status_code == 502
    assert "no answer" in r.json()["detail"] and "degraded" in r.json()["detail"]
    # the long answer alone failing: the program falls back to its pairs (a real answer),
    # and the degradation is in the trace the client gets
    lm = scripted_lm({"ClarifyFromPassages": titles_as_answers, "WriteLongAnswer": garbage})
    with _client(make_served(lm)) as c:
        r = c.post("/v1/answer", json={"question": Q})
    assert r.status_code == 200 and r.json()["answer"]
    assert any("long_answer: degraded" in e for e in r.json()["trace"]["events"])


def test_bearer_token(make_served):
    with _client(make_served(vanilla_rag_lm()), token="s3cret-token") as c:
        assert c.get("/healthz").status_code == 200  # probes need no token
        assert c.get("/readyz").status_code == 200
        assert c.get("/").status_code == 200  # the page holds no data
        r = c.post("/v1/answer", json={"question": Q})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        bad = {"Authorization": "Bearer wrong"}
        assert c.post("/v1/answer", json={"question": Q}, headers=bad).status_code == 401
        assert c.get("/v1/program", headers=bad).status_code == 401
        good = {"Authorization": "Bearer s3cret-token"}
        assert c.post("/v1/answer", json={"question": Q}, headers=good).status_code == 200
        assert c.get("/v1/program", headers=good).status_code == 200


def test_binding_beyond_loopback_needs_a_token():
    check_bind("127.0.0.1", None)
    check_bind("::1", None)
    check_bind("0.0.0.0", "t")
    with pytest.raises(ConfigError, match="token"):
        check_bind("0.0.0.0", None)
    with pytest.raises(ConfigError, match="token"):
        check_bind("192.168.1.10", None)
    check_bind("127.0.0.2", None)  # the whole 127/8 range is loopback
    check_bind("[::1]", None)
    # a host *name* that starts like a loopback address is not one (issue 42)
    for name in ("127.evil.invalid", "127.0.0.1.nip.io", "localhost.evil"):
        with pytest.raises(ConfigError, match="token"):
            check_bind(name, None)


def test_readyz_waits_for_loading_and_reports_failure(make_served):
    release = threading.Event()

    def slow_load():
        release.wait(10)
        return make_served(vanilla_rag_lm())

    with _client(slow_load) as c:
        assert c.get("/healthz").json() == {"ok": True}
        r = c.get("/readyz")
        assert r.status_code == 503 and "loading" in r.json()["detail"]
        assert c.post("/v1/answer", json={"question": Q}).status_code == 503
        release.set()
        deadline = time.monotonic() + 10
        while c.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert c.get("/readyz").json()["ready"] is True

    failures = []

    def broken():
        raise ConfigError("no index named 'nope'")

    with _client(broken, on_load_failed=failures.append) as c:
        deadline = time.monotonic() + 5
        while not failures and time.monotonic() < deadline:
            time.sleep(0.02)
        r = c.get("/readyz")
        assert r.status_code == 503 and "no index named" in r.json()["detail"]
    assert isinstance(failures[0], ConfigError)


def test_program_description(make_served):
    with _client(make_served(vanilla_rag_lm(), slots=2), queue=3, timeout_s=9) as c:
        d = c.get("/v1/program").json()
    assert d["program"] == "vanilla_rag"
    assert d["optimizer"] == {"name": "none"}
    assert d["demos_per_predictor"] == {"clarify.clarify": 0, "long_answer.write": 0} or \
        set(d["demos_per_predictor"].values()) == {0}
    assert d["index"]["index"] == "demo-memory"
    assert d["manifest"]["metric"] == "d-f1"
    assert (d["slots"], d["queue"], d["timeout_s"]) == (2, 3, 9)


def test_openapi_and_page(make_served):
    with _client(make_served(vanilla_rag_lm())) as c:
        spec = c.get("/openapi.json").json()
        page = c.get("/")
    assert {"/v1/answer", "/v1/program", "/healthz", "/readyz"} <= set(spec["paths"])
    assert "504" in spec["paths"]["/v1/answer"]["post"]["responses"]
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "connect-src 'self'" in page.headers["content-security-policy"]
    html = page.text
    # self-contained: no external script, style, font or image
    assert "http://" not in html and "https://" not in html and "src=" not in html
