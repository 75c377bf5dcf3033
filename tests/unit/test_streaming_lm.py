"""Token streaming in the LM layer (issue 43): the fake server's server-sent events, each
engine's ``stream`` (endpoint through the fake server, embedded over a stand-in llama.cpp
server, ResilientEngine's deadlines and retries), and the text sink ambiqa streams into."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import dspy
import pytest
from dspy import lm15

import ambiqa  # noqa: F401  (LITELLM_LOCAL_MODEL_COST_MAP before LiteLLM loads)
from ambiqa import testing_server
from ambiqa.lm import EmbeddedSettings, ResilientEngine, RetryPolicy, XLlamaEngine, endpoint_lm
from ambiqa.lm.streaming import text_sink


class Answer(dspy.Signature):
    """Answer the question."""

    question: str = dspy.InputField()
    long_answer: str = dspy.OutputField()


@pytest.fixture()
def fake():
    url, shutdown = testing_server.serve(delay=0.05, chunk_delay=0.002)
    yield url, shutdown
    shutdown()


def _request(text: str = "hi", **config) -> lm15.Request:
    return lm15.Request(model="x", messages=(lm15.Message.user(text),),
                        config=lm15.Config(**config))


def test_fake_server_streams_openai_chunks_then_done(fake):
    url, shutdown = fake
    body = {"model": "fake", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": "Your output fields are:\n"
                                                       "1. `long_answer` (str): x\n"},
                         {"role": "user", "content": "[[ ## question ## ]]\nWho is Ada?"}]}
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as reply:  # noqa: S310 (loopback)
        assert reply.headers["Content-Type"] == "text/event-stream"
        lines = [ln for ln in reply.read().decode().split("\n\n") if ln]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(ln.removeprefix("data: ")) for ln in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == testing_server.make_reply(body["messages"])
    assert len([c for c in chunks if c["choices"] and c["choices"][0]["delta"]]) > 5
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert shutdown.server.streamed == 1


def test_stream_pieces_rejoin_and_split_markers():
    text = "[[ ## long_answer ## ]]\nParis is big.\n\n[[ ## completed ## ]]"
    pieces = testing_server.stream_pieces(text)
    assert "".join(pieces) == text
    assert "[[" in pieces and "]]" in pieces  # a marker arrives over several pieces


def test_endpoint_lm_streams_into_the_sink_and_answers_whole(fake):
    url, shutdown = fake
    lm = endpoint_lm("openai/fake", api_base=url, cache=False)
    pieces = []
    with dspy.context(lm=lm), text_sink(pieces.append):
        streamed = dspy.Predict(Answer)(question="Who wrote Hamlet?")
    with dspy.context(lm=lm):
        whole = dspy.Predict(Answer)(question="Who wrote Hamlet?")
    assert streamed.long_answer == whole.long_answer
    texts = [p.text for p in pieces if not p.done]
    assert len(texts) > 5 and "".join(texts).startswith("[[ ## long_answer ## ]]")
    assert pieces[-1].done and len({p.call for p in pieces}) == 1
    assert shutdown.server.streamed == 1
    assert lm.history[-2]["usage"]["completion_tokens"] > 0  # usage survives streaming


def test_dspy_streamify_of_a_predictor_streams_through_the_resilient_engine(fake):
    import asyncio

    url, _ = fake
    lm = endpoint_lm("openai/fake", api_base=url, cache=False)
    stream = dspy.streamify(dspy.Predict(Answer),
                            stream_listeners=[dspy.streaming.StreamListener("long_answer")])

    async def run():
        chunks, final = [], None
        with dspy.context(lm=lm):
            async for value in stream(question="Who is Ada?"):
                if isinstance(value, dspy.Prediction):
                    final = value
                elif isinstance(value, dspy.streaming.StreamResponse):
                    chunks.append(value.chunk)
        return chunks, final

    chunks, final = asyncio.run(run())
    assert len([c for c in chunks if c]) > 1  # before issue 43: 0 (the reply came whole)
    assert "".join(chunks).strip() == final.long_answer


class _Scripted:
    """An inner engine whose ``stream`` plays a script per attempt: text pieces, then an
    exception or the end."""

    def __init__(self, attempts):
        self.attempts = list(attempts)
        self.calls = 0

    def complete(self, request):
        raise AssertionError("streaming engines are asked to stream")

    def stream(self, request):
        script = self.attempts[min(self.calls, len(self.attempts) - 1)]
        self.calls += 1
        yield lm15.StreamStartEvent(model="s")
        for step in script:
            if isinstance(step, Exception):
                raise step
            if isinstance(step, float):
                time.sleep(step)
                continue
            yield lm15.StreamDeltaEvent(delta=lm15.TextDelta(text=step))
        yield lm15.StreamEndEvent(finish_reason="stop", usage=lm15.Usage(input_tokens=1,
                                                                         output_tokens=2))


def _engine(inner, **policy):
    return ResilientEngine(inner, RetryPolicy(**{"timeout_s": 5.0, "max_retries": 2,
                                                 "base_delay_s": 0.0, **policy}),
                           sleep=lambda s: None)


def test_a_failure_before_any_text_is_retried_and_the_stream_has_one_start():
    inner = _Scripted([[lm15.ServerError("boom")], ["Hello", " world"]])
    events = list(_engine(inner).stream(_request()))
    assert inner.calls == 2
    assert [e.type for e in events] == ["start", "delta", "delta", "end"]
    pieces = []
    with text_sink(pieces.append):
        response = _engine(_Scripted([[lm15.ServerError("boom")], ["Hi"]])).complete(
            _request())
    assert response.text == "Hi" and [p.text for p in pieces] == ["Hi", ""]


def test_a_failure_after_text_is_not_retried():
    inner = _Scripted([["Hel", lm15.ServerError("cut off")], ["Hello"]])
    with pytest.raises(lm15.ServerError):
        list(_engine(inner).stream(_request()))
    assert inner.calls == 1  # the text was out: a retry would write it again


def test_a_stalled_stream_times_out():
    inner = _Scripted([["Hel", 3.0, "lo"]])
    engine = _engine(inner, timeout_s=0.3, max_retries=0)
    start = time.monotonic()
    with pytest.raises(lm15.TimeoutError), text_sink(lambda piece: None):
        engine.complete(_request())
    assert time.monotonic() - start < 2.0


def test_an_over_long_streamed_reply_is_cut_and_marked():
    engine = ResilientEngine(_Scripted([["abc", "defgh", "ij"]]), RetryPolicy(timeout_s=5),
                             max_output_chars=5)
    events = list(engine.stream(_request()))
    assert "".join(e.delta.text for e in events if e.type == "delta") == "abcde"
    assert events[-1].finish_reason == "length"


class _FakeLlamaServer:
    """Stands in for xllamacpp's Server: ``handle_chat_completions(body, callback)`` calls
    back once per chunk of llama.cpp's OpenAI stream until the callback returns True."""

    def __init__(self, pieces, error=None):
        self.pieces, self.error = pieces, error
        self.bodies = []
        self.stopped_at = None

    def handle_chat_completions(self, body, callback=None):
        self.bodies.append(body)
        assert callback is not None and body["stream"] is True
        if self.error is not None:
            callback(self.error)
            return
        for i, piece in enumerate(self.pieces):
            if callback({"id": "c1", "choices": [{"index": 0, "delta": {"content": piece},
                                                  "finish_reason": None}]}):
                self.stopped_at = i
                return
        callback({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                  "timings": {"prompt_n": 4, "cache_n": 6}})
        callback({"id": "c1", "choices": [], "usage": {"prompt_tokens": 10,
                                                        "completion_tokens": 3}})


def _embedded(server):
    engine = XLlamaEngine("unused.gguf", EmbeddedSettings(model="qwen2.5-coder-0.5b",
                                                          n_parallel=2))
    engine._server = server
    return engine


def test_embedded_engine_streams_llama_cpp_chunks_with_usage():
    server = _FakeLlamaServer(["Para", "graph", " one."])
    events = list(_embedded(server).stream(_request(max_tokens=20, stop=("[[",))))
    assert [e.type for e in events] == ["start", "delta", "delta", "delta", "end"]
    assert "".join(e.delta.text for e in events[1:-1]) == "Paragraph one."
    end = events[-1]
    assert end.finish_reason == "stop"
    assert (end.usage.input_tokens, end.usage.output_tokens, end.usage.cache_read_tokens) == \
        (10, 3, 6)  # computed 4 of 10 prompt tokens: 6 came from the cache
    body = server.bodies[0]
    assert body["stream_options"] == {"include_usage": True} and body["stop"] == ["[["]


def test_embedded_engine_stops_generating_when_the_reader_stops():
    gate = threading.Event()

    class Slow(_FakeLlamaServer):
        def handle_chat_completions(self, body, callback=None):
            for i in range(1000):
                if callback({"choices": [{"delta": {"content": f"w{i} "}}]}):
                    self.stopped_at = i
                    break
                gate.wait(0.01)

    server = Slow([])
    events = _embedded(server).stream(_request())
    assert next(events).type == "start" and next(events).type == "delta"
    events.close()
    deadline = time.monotonic() + 5
    while server.stopped_at is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.stopped_at is not None and server.stopped_at < 1000


def test_embedded_engine_reports_an_error_chunk():
    server = _FakeLlamaServer([], error={"code": 400, "message": "context too long"})
    with pytest.raises(RuntimeError, match="context too long"):
        list(_embedded(server).stream(_request()))
