"""The benchmark's fake OpenAI-compatible server: DSPy parses its replies, and it serves
requests concurrently (the property the efficiency benchmark relies on)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Literal

import dspy
import pytest

import ambiqa  # noqa: F401  (LITELLM_LOCAL_MODEL_COST_MAP before LiteLLM loads)
from ambiqa import testing_server
from ambiqa.signatures.common import QAPair

fake = testing_server


class IsSupported(dspy.Signature):
    """Say whether the passages answer the question."""

    question: str = dspy.InputField()
    passages: str = dspy.InputField()
    supported: bool = dspy.OutputField()


class Clarify(dspy.Signature):
    """List the readings of the question with answers."""

    question: str = dspy.InputField()
    passages: str = dspy.InputField()
    pairs: list[QAPair] = dspy.OutputField()


class Kind(dspy.Signature):
    """Type the ambiguity and give a reason and alternatives."""

    question: str = dspy.InputField()
    reason: str = dspy.OutputField()
    kind: Literal["None", "AmbTime", "AmbLoc"] = dspy.OutputField()
    rewrites: list[str] = dspy.OutputField()
    count: int = dspy.OutputField()


@pytest.fixture()
def server():
    url, shutdown = fake.serve(delay=0.3)
    yield url, shutdown
    shutdown()


def _lm(url: str):
    return dspy.LM("openai/fake", api_base=url, api_key="not-needed", cache=False,
                   num_retries=0)


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(f"{url}/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def test_bool_signature_parses(server):
    url, _ = server
    with dspy.context(lm=_lm(url)):
        pred = dspy.Predict(IsSupported)(question="Who won?", passages="[1] A won.")
    assert isinstance(pred.supported, bool)


def test_list_of_qapair_signature_parses(server):
    url, _ = server
    with dspy.context(lm=_lm(url)):
        pred = dspy.Predict(Clarify)(question="When was the first iPhone made?",
                                     passages="[1] iPhone: released 2007.")
    assert len(pred.pairs) == 2
    assert all(isinstance(p, QAPair) for p in pred.pairs)
    assert pred.pairs[0].question != pred.pairs[1].question
    assert [p.passage for p in pred.pairs] == [1, 2]
    assert all(p.question.endswith("?") and p.answer for p in pred.pairs)


def test_literal_list_and_int_signature_parses(server):
    url, _ = server
    with dspy.context(lm=_lm(url)):
        pred = dspy.Predict(Kind)(question="Who is the president?")
    assert pred.kind == "AmbTime"  # the first allowed value other than "None"
    assert "Who is the president" in pred.reason
    assert len(pred.rewrites) == 2 and len(set(pred.rewrites)) == 2
    assert pred.count == 1


def test_json_adapter_fallback_parses(server):
    url, _ = server
    with dspy.context(lm=_lm(url), adapter=dspy.JSONAdapter()):
        pred = dspy.Predict(Clarify)(question="Who sang it?", passages="[1] x")
    assert len(pred.pairs) == 2


def test_usage_is_reported(server):
    url, _ = server
    reply = _post(url, {"model": "fake", "messages": [{"role": "user", "content": "hi"}]})
    assert reply["usage"]["prompt_tokens"] >= 1
    assert reply["usage"]["completion_tokens"] >= 1
    assert reply["choices"][0]["finish_reason"] == "stop"


def test_two_requests_are_served_concurrently():
    delay = 0.5
    url, shutdown = fake.serve(delay=delay)
    try:
        body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
        _post(url, body)  # first connection set-up outside the timing
        results: list[dict] = []
        threads = [threading.Thread(target=lambda: results.append(_post(url, body)))
                   for _ in range(2)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        assert len(results) == 2
        assert delay <= elapsed < 1.6 * delay, elapsed  # one delay, not two
        assert shutdown.server.peak == 2
    finally:
        shutdown()


def test_two_dspy_calls_overlap_through_run_parallel(monkeypatch):
    from ambiqa.parallel import run_parallel

    monkeypatch.setenv("AMBIQA_PARALLEL", "2")
    delay = 0.5
    url, shutdown = fake.serve(delay=delay)
    try:
        lm = _lm(url)
        with dspy.context(lm=lm):
            dspy.Predict(IsSupported)(question="warm", passages="up")
            t0 = time.perf_counter()
            preds = run_parallel(lambda q: dspy.Predict(IsSupported)(question=q, passages="p"),
                                 ["a?", "b?"])
            elapsed = time.perf_counter() - t0
        assert all(isinstance(p.supported, bool) for p in preds)
        assert elapsed < 1.8 * delay, elapsed
        assert shutdown.server.peak == 2
    finally:
        shutdown()


def test_loopback_only_and_stops():
    url, shutdown = fake.serve(delay=0.0)
    assert url.startswith("http://127.0.0.1:")
    shutdown()
    shutdown()  # idempotent
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        _post(url, {"model": "fake", "messages": []})


def test_oversized_body_is_refused(server, monkeypatch):
    url, _ = server
    monkeypatch.setattr(fake, "MAX_BODY_BYTES", 100)
    with pytest.raises(urllib.error.HTTPError) as err:
        _post(url, {"model": "fake", "messages": [{"role": "user", "content": "x" * 500}]})
    assert err.value.code == 413


def test_output_fields_parse_nested_types():
    system = ("Your output fields are:\n"
              "1. `kind` (Literal['a (x)', 'b']): pick one (carefully)\n"
              "2. `items` (list[dict[str, int]]): things\n"
              "All interactions will be structured in the following way")
    assert fake.output_fields(system) == [("kind", "Literal['a (x)', 'b']"),
                                          ("items", "list[dict[str, int]]")]


def test_bool_values_are_deterministic_and_mixed():
    messages = [{"role": "system", "content": "Your output fields are:\n1. `ok` (bool): x\n"},
                None]
    seen = set()
    for i in range(20):
        messages[1] = {"role": "user", "content": f"[[ ## question ## ]]\nq{i}?"}
        first = fake.make_reply(messages)
        assert fake.make_reply(messages) == first
        seen.add(first.split("\n")[1])
    assert seen == {"True", "False"}
