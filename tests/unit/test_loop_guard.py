"""The loop guard: a reply repeating a sentence is stopped at the third copy and keeps one,
the same whether the engine watched it live or the adapter cut a stored reply."""

from __future__ import annotations

import dspy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ambiqa.lm.adapter import ListTolerantChatAdapter
from ambiqa.lm.loop_guard import LoopWatch, cut_loop
from ambiqa.tracing import track
from tests.unit.test_lm import FakeLlamaServer, fake_embedded_lm, llama_reply

# stored ASQA dev long answers of zero-shot Diva (compile-v4 rows), shortened
SHERIFF = ("The current sheriff is Paul Penzone. The current sheriff is the elected official "
           "who is responsible for law enforcement in Maricopa County. The current sheriff is "
           "the elected official who is responsible for law enforcement in Maricopa County. The "
           "current sheriff is the elected official who is responsible for law enforcement in "
           "Maricopa County. The current sheriff is the elected official who is")
PREAMBLE = "The long answer is:\n" * 6 + "The long"


def test_a_sentence_said_three_times_keeps_its_first_copy():
    assert cut_loop(SHERIFF) == ("The current sheriff is Paul Penzone. The current sheriff is "
                                 "the elected official who is responsible for law enforcement "
                                 "in Maricopa County.")
    assert cut_loop(PREAMBLE) == "The long answer is:"


def test_two_copies_a_short_sentence_and_list_items_are_not_loops():
    twice = "Ann won in 2001. Ann won in 2001. Then Bo won in 2002."
    assert cut_loop(twice) is None  # said twice, then the model moved on
    assert cut_loop("Yes. Yes. Yes. Yes.") is None  # under three words
    # a list naming one item three times is the adapter's degenerate list (DSPy asks again)
    assert cut_loop("- Who won the cup?\n- Who won the cup?\n- Who won the cup?\n") is None
    assert cut_loop("He was 3.5 m tall. He was 3.5 m tall.") is None


def test_a_repeating_pair_of_sentences_is_a_loop_too():
    pair = "Ann sang the anthem. Bo played the cello. " * 3 + "Ann sang"
    assert cut_loop(pair) == "Ann sang the anthem. Bo played the cello."


def test_the_cut_is_idempotent():
    once = cut_loop(SHERIFF)
    assert once is not None and cut_loop(once) is None


_SENTENCES = ["Ann won the cup.", "Bo won it in 2002.", "The final was in Rome.", "Yes.",
              "- Who won?", "[[ ## answer ## ]]"]


@settings(max_examples=300, deadline=None)
@given(units=st.lists(st.sampled_from(_SENTENCES), max_size=14),
       cuts=st.lists(st.integers(min_value=1, max_value=7), max_size=60))
def test_watching_live_cuts_where_cutting_the_whole_reply_does(units, cuts):
    """Greedy decoding makes the guarded reply a prefix of the unguarded one; the watch stops
    at the first unit completing a loop, so its kept text is cut_loop of the whole reply --
    the property that lets stored unguarded replies replay as guarded ones."""
    reply = " ".join(units)
    watch, pos, stopped = LoopWatch(), 0, False
    for size in cuts + [len(reply)]:
        if pos >= len(reply):
            break
        if watch.feed(reply[pos:pos + size]):
            stopped = True
            break
        pos += size
    kept = watch.cut if stopped else (cut_loop(watch.text) or watch.text)
    assert kept == (cut_loop(reply) or reply)


class _Answer(dspy.Signature):
    """Answer."""

    question: str = dspy.InputField()
    long_answer: str = dspy.OutputField()


def test_the_adapter_cuts_a_stored_looping_reply_and_counts_it():
    adapter = ListTolerantChatAdapter()
    with track() as t:
        out = adapter.parse(_Answer, f"[[ ## long_answer ## ]]\n{SHERIFF}")
    assert out["long_answer"].endswith("in Maricopa County.")
    assert out["long_answer"].count("elected official") == 1
    assert t.loops_cut == 1


def test_the_adapter_leaves_replies_alone_when_the_guard_is_off(monkeypatch):
    monkeypatch.setenv("AMBIQA_LOOP_GUARD", "0")
    out = ListTolerantChatAdapter().parse(_Answer, f"[[ ## long_answer ## ]]\n{SHERIFF}")
    assert out["long_answer"].count("elected official") == 4  # the partial fourth too


@pytest.mark.parametrize("guard", [True, False])
def test_the_engine_stops_a_looping_reply_and_counts_tokens_from_timings(guard, use_lm):
    import ambiqa.lm as L

    reply = f"[[ ## long_answer ## ]]\n{SHERIFF} responsible for law enforcement."
    server = FakeLlamaServer([llama_reply(reply, 900, 600, 300, completion_tokens=80,
                                          finish="length")])
    settings_ = L.EmbeddedSettings(model=L.FAST_MODEL, loop_guard=guard)
    use_lm(fake_embedded_lm(server, settings_))
    with track() as t, dspy.context(adapter=ListTolerantChatAdapter()):
        out = dspy.Predict(_Answer)(question="Who is the sheriff?")
    assert out.long_answer.count("elected official") == 1  # the adapter keeps one either way
    (record,) = [r for r in t.records if r.kind == "lm"]
    if guard:  # stopped at the third copy: fewer tokens decoded, not a truncation
        assert server.bodies[0]["stream"] is True
        assert record.finish_reason == "loop" and t.truncated_calls == 0
        assert 0 < record.output_tokens < 80
        assert record.input_tokens == 900 and record.cached_tokens == 300
    else:  # decoded to the cap, cut when parsed
        assert "stream" not in server.bodies[0]
        assert record.finish_reason == "length" and record.output_tokens == 80
    assert t.loops_cut == 1


def test_a_reply_without_a_loop_streams_to_the_same_reply_and_usage(use_lm):

    server = FakeLlamaServer([llama_reply("[[ ## long_answer ## ]]\nAnn won in 2001.", 500,
                                          200, 300, completion_tokens=12)])
    use_lm(fake_embedded_lm(server))
    with track() as t, dspy.context(adapter=ListTolerantChatAdapter()):
        out = dspy.Predict(_Answer)(question="Who won?")
    assert out.long_answer == "Ann won in 2001."
    (record,) = [r for r in t.records if r.kind == "lm"]
    assert (record.finish_reason, record.output_tokens, record.input_tokens) == ("stop", 12, 500)
    assert t.loops_cut == 0


def test_unguarded_embedded_lms_keep_their_own_cache_identity():
    import ambiqa.lm as L
    from ambiqa.lm.resilience import CACHE_IDENTITY_KEY

    on = L.embedded_lm(L.EmbeddedSettings(model=L.FAST_MODEL), cache=False)
    off = L.embedded_lm(L.EmbeddedSettings(model=L.FAST_MODEL, loop_guard=False), cache=False)
    assert "loop_guard" not in on.kwargs["metadata"][CACHE_IDENTITY_KEY]
    assert "loop_guard=off" in off.kwargs["metadata"][CACHE_IDENTITY_KEY]
    # engines are shared per model and settings; the guard is one of them (it stops decoding)
    assert on.engine.inner.settings.loop_guard and not off.engine.inner.settings.loop_guard
