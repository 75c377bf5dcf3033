"""Embedded model assembly (atomic, verified), LM specs, and cost tracing."""

from __future__ import annotations

import hashlib
import sys
import time
import types

import pytest

from ambiqa import lm as L
from ambiqa.errors import ConfigError, ModelError
from ambiqa.parallel import run_parallel
from ambiqa.testing import scripted_lm
from ambiqa.tracing import CallRecord, CostTrace, record_event, track


def _fake_parts(tmp_path, monkeypatch, chunks: list[bytes], name="fake_model_part{i}"):
    for i, data in enumerate(chunks, start=1):
        f = tmp_path / f"part{i}.bin"
        f.write_bytes(data)
        mod = types.ModuleType(name.format(i=i))
        mod.get_part_path = (lambda p: (lambda: str(p)))(f)
        monkeypatch.setitem(sys.modules, name.format(i=i), mod)
    blob = b"".join(chunks)
    return L.EmbeddedModel(name="fake", module_pattern=name, n_parts=len(chunks), size=len(blob),
                           sha256=hashlib.sha256(blob).hexdigest(), install_hint="pip install x")


def test_assemble_concatenates_verifies_and_reuses(tmp_path, monkeypatch):
    spec = _fake_parts(tmp_path, monkeypatch, [b"abc", b"def", b"g"])
    monkeypatch.setitem(L.EMBEDDED_MODELS, "fake", spec)
    out = L.assemble_model("fake", cache_dir=tmp_path / "cache")
    assert out.read_bytes() == b"abcdefg"
    mtime = out.stat().st_mtime_ns
    time.sleep(0.01)
    assert L.assemble_model("fake", cache_dir=tmp_path / "cache").stat().st_mtime_ns == mtime
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".part")]


def test_hash_mismatch_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    spec = _fake_parts(tmp_path, monkeypatch, [b"abc", b"def"])
    bad = L.EmbeddedModel(**{**spec.__dict__, "sha256": "0" * 64})
    monkeypatch.setitem(L.EMBEDDED_MODELS, "fake", bad)
    with pytest.raises(ModelError, match="sha256"):
        L.assemble_model("fake", cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_missing_part_names_the_package(tmp_path, monkeypatch):
    spec = L.EmbeddedModel(name="ghost", module_pattern="ghost_part_{i}", n_parts=2, size=1,
                           sha256="0", install_hint="pip install 'ambiqa[ghost]'")
    monkeypatch.setitem(L.EMBEDDED_MODELS, "ghost", spec)
    with pytest.raises(ModelError, match=r"part 1/2 \(ghost_part_1\)") as err:
        L.assemble_model("ghost", cache_dir=tmp_path)
    assert "ambiqa[ghost]" in str(err.value)


def test_lm_specs():
    with pytest.raises(ConfigError, match="unknown embedded model"):
        L.make_lm("embedded:nope")
    with pytest.raises(ConfigError, match="neither"):
        L.make_lm("gpt4")
    with pytest.raises(ConfigError, match="NO_SUCH_KEY_VAR"):
        L.make_lm("openai/gpt-4o-mini", api_key_env="NO_SUCH_KEY_VAR")


def test_endpoint_lm_never_exposes_the_key(monkeypatch):
    monkeypatch.setenv("AMBIQA_TEST_KEY", "sk-secret-123")
    lm = L.make_lm("openai/gpt-4o-mini", api_key_env="AMBIQA_TEST_KEY")
    assert "sk-secret-123" not in str(lm.dump_state())
    assert L.lm_id(lm) == "openai/gpt-4o-mini"


def test_trace_counts_tokens_modules_and_parallel_calls(use_lm):
    import dspy

    from ambiqa.signatures.answering import ClosedBookLongAnswer

    use_lm(scripted_lm({"ClosedBookLongAnswer": {"long_answer": "x y z"}}, delay_s=0.2))
    predict = dspy.Predict(ClosedBookLongAnswer)
    with track() as outer:
        with track() as inner:
            predict(question="q1")
        run_parallel(lambda q: predict(question=q), ["a", "b", "c", "d"], max_workers=4)
        record_event("step", "degraded: test")
    assert inner.lm_calls == 1 and outer.lm_calls == 5
    assert outer.by_module() == {"ClosedBookLongAnswer": 5}
    assert outer.input_tokens > 0 and outer.output_tokens > 0
    assert outer.events == ["step: degraded: test"]
    # four 0.2 s calls in parallel: critical path well under their summed latency
    assert outer.critical_path_s < outer.lm_latency_s * 0.7


def test_critical_path_merges_overlapping_intervals():
    t = CostTrace()
    for s, e in [(0, 2), (1, 3), (5, 6)]:
        t.add(CallRecord(kind="lm", start=s, end=e, latency_s=e - s))
    assert t.critical_path_s == pytest.approx(4.0)
    assert t.lm_latency_s == pytest.approx(5.0)


def test_truncated_replies_are_counted(use_lm):
    import dspy
    from dspy.lm15 import Message, Response, TextPart, Usage

    from ambiqa.signatures.answering import ClosedBookLongAnswer
    from ambiqa.tracing import note_finish_reason

    class Truncating:
        def complete(self, request):
            note_finish_reason("length")
            return Response(id=None, model="t", message=Message.assistant(TextPart(
                "[[ ## long_answer ## ]]\ncut off mid")), finish_reason="length",
                usage=Usage(input_tokens=10, output_tokens=5))

        def close(self):
            pass

    use_lm(dspy.LM("local/trunc", engine=Truncating(), cache=False, num_retries=0))
    with track() as t:
        dspy.Predict(ClosedBookLongAnswer)(question="q")
    assert t.truncated_calls >= 1


# ---- issue 13: computed-token accounting, caps, slots, budgets, field order ------------------
class FakeLlamaServer:
    """Stands in xllamacpp's Server: replies like llama.cpp (usage + timings), records bodies,
    and tracks how many requests run at once."""

    def __init__(self, replies, delay_s: float = 0.0):
        self.replies = list(replies)
        self.bodies = []
        self.delay_s = delay_s
        self.active = 0
        self.peak = 0
        self._lock = __import__("threading").Lock()

    def handle_chat_completions(self, body, callback=None):
        with self._lock:
            self.bodies.append(body)
            self.active += 1
            self.peak = max(self.peak, self.active)
            reply = self.replies[min(len(self.bodies) - 1, len(self.replies) - 1)]
        time.sleep(self.delay_s)
        try:
            if callback is None:
                return reply
            stream_reply(reply, callback)  # the loop guard asks for a stream
            return None
        finally:
            with self._lock:
                self.active -= 1


def stream_reply(reply, callback):
    """``reply`` (a non-streamed llama.cpp reply) played as llama.cpp streams it with
    ``timings_per_token``: a chunk per word carrying the running timings, then the finish
    reason, then usage; stops when ``callback`` returns True (no usage chunk then)."""
    import re

    if "choices" not in reply:
        callback(reply)
        return
    choice = reply["choices"][0]
    timings = dict(reply.get("timings") or {})
    pieces = re.findall(r"\S+\s*|\s+", choice["message"]["content"])
    for i, piece in enumerate(pieces):
        if callback({"choices": [{"finish_reason": None, "delta": {"content": piece}}],
                     "timings": {**timings, "predicted_n": i + 1}}):
            return
    if callback({"choices": [{"finish_reason": choice["finish_reason"], "delta": {}}],
                 "timings": timings}):
        return
    callback({"choices": [], "usage": reply.get("usage"), "timings": timings})


def llama_reply(text, prompt_tokens, prompt_n, cache_n, completion_tokens=7, finish="stop"):
    return {"choices": [{"finish_reason": finish, "message": {"content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": cache_n}},
            "timings": {"prompt_n": prompt_n, "cache_n": cache_n}}


def fake_embedded_lm(server, settings=None):
    import dspy

    settings = settings or L.EmbeddedSettings(model=L.FAST_MODEL)
    engine = L.XLlamaEngine("/nonexistent.gguf", settings)
    engine._server = server
    return dspy.LM("embedded/fake", engine=L.ResilientEngine(
        engine, L.RetryPolicy(timeout_s=None), output_caps=settings.output_caps,
        stop_at_marker=settings.stop_at_marker), cache=False, num_retries=0, max_tokens=512)


def test_computed_prompt_tokens_come_from_llama_timings():
    assert L.computed_prompt_tokens(llama_reply("x", 1600, 17, 1583)) == (1600, 17)
    # no timings: the usage details say what was cached
    assert L.computed_prompt_tokens({"usage": {"prompt_tokens": 100, "prompt_tokens_details":
                                               {"cached_tokens": 60}}}) == (100, 40)
    # neither: every prompt token was computed
    assert L.computed_prompt_tokens({"usage": {"prompt_tokens": 50}}) == (50, 50)


def test_trace_splits_prompt_tokens_into_computed_and_cached(use_lm):
    import dspy

    from ambiqa.signatures.answering import ClosedBookLongAnswer

    answer = "[[ ## long_answer ## ]]\nIt is A.\n\n[[ ## completed ## ]]"
    server = FakeLlamaServer([llama_reply(answer, 1600, 1600, 0, 9),
                              llama_reply(answer, 1610, 17, 1593, 9)])
    use_lm(fake_embedded_lm(server))
    predict = dspy.Predict(ClosedBookLongAnswer)
    with track() as t:
        predict(question="q1")
        predict(question="q2")
    assert (t.input_tokens, t.computed_tokens, t.cached_tokens) == (3210, 1617, 1593)
    assert t.output_tokens == 18
    assert t.cached_share == pytest.approx(1593 / 3210)
    row = t.summary()["by_signature"]["ClosedBookLongAnswer"]
    assert row == {"calls": 2, "input_tokens": 3210, "computed_tokens": 1617,
                   "output_tokens": 18, "max_output_tokens": 9, "truncated": 0,
                   "parse_failures": 0}
    assert t.summary()["computed_tokens"] == 1617


def test_output_caps_and_stop_marker_are_applied_per_signature(use_lm):
    import dspy

    from ambiqa.lm.resilience import STOP_SEQUENCES
    from ambiqa.signatures.answering import ClosedBookLongAnswer
    from ambiqa.signatures.verification import VerifyInterpretation

    reply = llama_reply("[[ ## supported ## ]]\nTrue", 300, 300, 0, 5)
    server = FakeLlamaServer([reply])
    use_lm(fake_embedded_lm(server))
    with track() as t:
        dspy.Predict(VerifyInterpretation)(interpretation="q?", passages="[1] p")
    assert server.bodies[-1]["max_tokens"] == VerifyInterpretation.output_cap_tokens < 512
    assert list(STOP_SEQUENCES) == [s for s in server.bodies[-1]["stop"] if s in STOP_SEQUENCES]
    assert t.records[0].max_tokens == VerifyInterpretation.output_cap_tokens
    # a reply cut at its cap is counted as truncated, per signature
    cut = llama_reply("[[ ## long_answer ## ]]\nIt is A and", 300, 300, 0,
                      ClosedBookLongAnswer.output_cap_tokens, finish="length")
    server.replies = [cut]
    with track() as t:
        dspy.Predict(ClosedBookLongAnswer)(question="q")
    assert server.bodies[-1]["max_tokens"] == ClosedBookLongAnswer.output_cap_tokens
    assert t.truncated_calls == 1
    assert t.by_signature()["ClosedBookLongAnswer"]["truncated"] == 1


def test_a_changed_output_cap_is_not_answered_from_the_cache(use_lm, tmp_path, monkeypatch):
    """The cap is part of what answers a call, so the response cache keys on it (issue 42):
    replies stored under a signature's old cap must not answer after the cap moved (a run
    did, when VerifyRetrievalBrief's cap went from 64 to 128)."""
    import dspy
    from dspy.clients.cache import Cache

    from ambiqa.lm.capped import CappedLM
    from ambiqa.signatures.verification import VerifyInterpretation

    monkeypatch.setattr(dspy, "cache", Cache(enable_disk_cache=True, enable_memory_cache=True,
                                             disk_cache_dir=str(tmp_path / "cache")))
    reply = llama_reply("[[ ## supported ## ]]\nTrue", 300, 300, 0, 5)
    server = FakeLlamaServer([reply, reply, reply])
    settings = L.EmbeddedSettings(model=L.FAST_MODEL)
    engine = L.XLlamaEngine("/nonexistent.gguf", settings)
    engine._server = server
    lm = CappedLM("embedded/fake", engine=L.ResilientEngine(
        engine, L.RetryPolicy(timeout_s=None), output_caps=True), cache=True, num_retries=0,
        max_tokens=512)
    use_lm(lm)
    ask = dspy.Predict(VerifyInterpretation)
    ask(interpretation="q?", passages="[1] p")
    ask(interpretation="q?", passages="[1] p")  # the same call: from the cache
    assert len(server.bodies) == 1
    assert server.bodies[0]["max_tokens"] == VerifyInterpretation.output_cap_tokens
    monkeypatch.setattr(VerifyInterpretation, "output_cap_tokens",
                        VerifyInterpretation.output_cap_tokens * 2)
    ask(interpretation="q?", passages="[1] p")  # the cap moved: asked anew
    assert len(server.bodies) == 2
    assert server.bodies[1]["max_tokens"] == VerifyInterpretation.output_cap_tokens


def test_the_embedded_lm_carries_its_caps_to_the_cache_key(monkeypatch):
    import ambiqa.lm.factory as factory
    from ambiqa.lm.capped import CappedLM

    monkeypatch.setattr(factory, "assemble_model", lambda name: "/nonexistent.gguf")
    monkeypatch.setattr(factory, "XLlamaEngine", lambda path, settings: object())
    monkeypatch.setattr(factory, "_ENGINES", {})
    assert isinstance(factory.embedded_lm(L.EmbeddedSettings(model=L.FAST_MODEL)), CappedLM)
    legacy = L.EmbeddedSettings(model=L.FAST_MODEL, output_caps=False)
    assert not isinstance(factory.embedded_lm(legacy), CappedLM)


def test_legacy_settings_send_no_caps_and_no_stop(use_lm):
    import dspy

    from ambiqa.signatures.verification import VerifyInterpretation

    server = FakeLlamaServer([llama_reply("[[ ## supported ## ]]\nFalse", 300, 300, 0, 5)])
    use_lm(fake_embedded_lm(server, L.EmbeddedSettings.legacy(model=L.FAST_MODEL)))
    dspy.Predict(VerifyInterpretation)(interpretation="q?", passages="[1] p")
    assert server.bodies[-1]["max_tokens"] == 512
    assert "stop" not in server.bodies[-1]


def test_format_retries_are_counted(use_lm):
    import dspy

    from ambiqa.signatures.answering import ClosedBookLongAnswer

    # the ChatAdapter reply lacks its field; DSPy retries with the JSON adapter, which parses
    server = FakeLlamaServer([llama_reply("just some words", 200, 200, 0),
                              llama_reply('{"long_answer": "It is A."}', 220, 20, 200)])
    use_lm(fake_embedded_lm(server))
    with track() as t:
        pred = dspy.Predict(ClosedBookLongAnswer)(question="q")
    assert pred.long_answer == "It is A."
    assert t.lm_calls == 2 and t.format_retries == 1
    assert t.by_signature()["ClosedBookLongAnswer"]["parse_failures"] == 1


def test_slots_admit_that_many_concurrent_requests():
    from dspy.lm15 import Config, Message, Request

    def request(i):
        return Request(model="m", messages=(Message.user(f"hi {i}"),),
                       config=Config(max_tokens=5))

    for slots in (1, 3):
        server = FakeLlamaServer([llama_reply("ok", 5, 5, 0)], delay_s=0.15)
        engine = L.XLlamaEngine("/nonexistent.gguf",
                                L.EmbeddedSettings(model=L.FAST_MODEL, n_parallel=slots))
        engine._server = server
        run_parallel(lambda i, e=engine: e.complete(request(i)), range(6), max_workers=6)
        assert server.peak == slots


def test_server_context_is_scaled_per_slot_and_cache_sized_from_kv(monkeypatch):
    made = {}

    class Params(types.SimpleNamespace):
        def __init__(self):
            super().__init__(model=types.SimpleNamespace(path=""),
                             cpuparams=types.SimpleNamespace(n_threads=0),
                             cpuparams_batch=types.SimpleNamespace(n_threads=0))

    fake = types.ModuleType("xllamacpp")
    fake.CommonParams = Params
    fake.Server = lambda p: made.setdefault("params", p)
    monkeypatch.setitem(sys.modules, "xllamacpp", fake)
    settings = L.EmbeddedSettings(model=L.DEFAULT_MODEL, n_parallel=3)
    L.XLlamaEngine("/x.gguf", settings)._ensure_server()
    p = made["params"]
    assert (p.n_parallel, p.n_ctx, p.kv_unified, p.cont_batching) == (3, 3 * 4096, False, True)
    assert L.EMBEDDED_MODELS[L.DEFAULT_MODEL].kv_bytes_per_token() == 28 * 2 * 128 * 2 * 2
    assert p.cache_ram_mib == L.prompt_cache_mib(L.DEFAULT_MODEL) == 448
    assert L.EmbeddedSettings.legacy().n_parallel == 1
    with pytest.raises(ConfigError, match="n_parallel"):
        L.EmbeddedSettings(n_parallel=0)


def test_passage_budget_cuts_long_passages_and_counts_each_cut():
    from ambiqa.programs.base import format_passages
    from ambiqa.signatures.common import passage_budget
    from ambiqa.types import Passage

    long = Passage("p1", "Long", " ".join(f"w{i}" for i in range(300)))
    short = Passage("p2", "Short", "just ten words " * 3)
    with track() as t:
        with passage_budget(100):
            text = format_passages([long, short])
    first, second = text.splitlines()
    assert first == "[1] Long: " + " ".join(f"w{i}" for i in range(100)) + " ..."
    assert second == "[2] Short: " + short.text
    assert t.passages_cut == 1 and t.summary()["passages_cut"] == 1
    with track() as t, passage_budget(None):
        assert "w299" in format_passages([long])
    assert t.passages_cut == 0


# every signature's output cap: tests/unit/signatures/test_output_caps.py


#: input field order of the answering signatures: inputs shared by several calls of one
#: question first, so llama.cpp's prompt cache reuses them (issue 13)
ANSWERING_FIELD_ORDER = {
    "ReadShortAnswer": ["context", "question"],  # one long answer, many disambiguated questions
    "ShortAnswer": ["question", "passages"],  # one question, each EoR member's passages
    "AnswerFromReasoning": ["question", "passages", "reasoning"],
    "AnswerFromMemories": ["question", "global_evidence", "local_pathway"],
    "WriteLongAnswer": ["question", "interpretations", "passages"],
    "ClosedBookLongAnswer": ["question"],
    "BackgroundDocument": ["question"],
}


def test_answering_signatures_put_shared_inputs_first():
    from ambiqa.signatures import answering

    for name, order in ANSWERING_FIELD_ORDER.items():
        assert list(getattr(answering, name).input_fields) == order, name


def test_long_answer_prompt_asks_for_answers_not_commentary():
    from ambiqa.signatures.answering import ClosedBookLongAnswer, WriteLongAnswer

    for sig in (WriteLongAnswer, ClosedBookLongAnswer):
        text = " ".join(sig.instructions.lower().split())
        assert "few sentences" in text and "no introduction" in text
        assert "explain that it is ambiguous" not in text


def test_calls_sharing_a_prompt_prefix_take_turns_others_run_together():
    from dspy.lm15 import Config, Message, Request

    shared = "[[ ## passages ## ]]\n" + "passage text " * 100

    def request(tail):
        return Request(model="m", messages=(Message.user(shared + tail),),
                       config=Config(max_tokens=5))

    server = FakeLlamaServer([llama_reply("ok", 5, 5, 0)], delay_s=0.15)
    engine = L.XLlamaEngine("/nonexistent.gguf",
                            L.EmbeddedSettings(model=L.FAST_MODEL, n_parallel=3))
    engine._server = server
    run_parallel(lambda i: engine.complete(request(f"q{i}")), range(4), max_workers=4)
    assert server.peak == 1  # one passage block: in turn, each reuses the cached prefix
    server.peak = 0
    run_parallel(lambda i: engine.complete(Request(model="m", messages=(Message.user(
        f"question {i} " + shared),), config=Config(max_tokens=5))), range(4), max_workers=4)
    assert server.peak == 3  # different prefixes: concurrent, up to the slot count
    assert L.prefix_key([{"role": "user", "content": shared + "a"}]) == \
        L.prefix_key([{"role": "user", "content": shared + "b"}])
