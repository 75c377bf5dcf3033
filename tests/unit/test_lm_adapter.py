"""ambiqa.lm.adapter: a list field written as a Markdown list parses on the first try."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError

from ambiqa.lm.adapter import ListTolerantChatAdapter, markdown_list, rewrite_lists
from ambiqa.signatures.disambiguation import ClarifyFromPassages, PseudoInterpretations
from ambiqa.testing import scripted_lm
from ambiqa.tracing import default_callback, track

# the form the 1.5B wrote in a probe of ASQA dev questions (three copies of the question)
MARKDOWN_REPLY = ("[[ ## interpretations ## ]]\n- Who won the 2018 final?\n"
                  "- Who won the 2019 final?\n\n[[ ## completed ## ]]")


def test_markdown_lists_are_read_and_prose_is_not() -> None:
    assert markdown_list("- a\n* b\n• c\n1. d\n2) e\n") == ["a", "b", "c", "d", "e"]
    assert markdown_list("- a\nnot an item") is None
    assert markdown_list("") is None


def test_a_list_that_repeats_itself_is_left_to_the_retry() -> None:
    """The probe's reply: the question three times. The JSONAdapter retry did better."""
    same = ("[[ ## interpretations ## ]]\n- Who made it through?\n- who made it  through?\n"
            "\n[[ ## completed ## ]]")
    assert rewrite_lists(PseudoInterpretations, same) is None
    with pytest.raises(AdapterParseError):
        ListTolerantChatAdapter().parse(PseudoInterpretations, same)


def test_only_list_fields_are_rewritten() -> None:
    rewritten = rewrite_lists(PseudoInterpretations, MARKDOWN_REPLY)
    assert rewritten is not None
    assert '["Who won the 2018 final?", "Who won the 2019 final?"]' in rewritten
    # list[QAPair] is not a list of strings: a Markdown list cannot stand for it
    pairs = "[[ ## pairs ## ]]\n- q one\n- q two\n\n[[ ## completed ## ]]"
    assert rewrite_lists(ClarifyFromPassages, pairs) is None


def test_the_adapter_reads_what_chat_adapter_refuses() -> None:
    with pytest.raises(AdapterParseError):
        dspy.ChatAdapter().parse(PseudoInterpretations, MARKDOWN_REPLY)
    parsed = ListTolerantChatAdapter().parse(PseudoInterpretations, MARKDOWN_REPLY)
    assert parsed == {"interpretations": ["Who won the 2018 final?", "Who won the 2019 final?"]}
    # a JSON list still goes the ordinary way
    ok = "[[ ## interpretations ## ]]\n[\"a?\", \"b?\"]\n\n[[ ## completed ## ]]"
    assert ListTolerantChatAdapter().parse(PseudoInterpretations, ok) == {
        "interpretations": ["a?", "b?"]}


def test_other_failures_still_fail_with_chat_adapters_error() -> None:
    missing = "[[ ## reason ## ]]\nthe reply ran out before its list\n"
    with pytest.raises(AdapterParseError):
        ListTolerantChatAdapter().parse(PseudoInterpretations, missing)


def test_one_call_where_chat_adapter_paid_a_json_retry() -> None:
    """With ChatAdapter the Markdown reply costs a second (JSONAdapter) call; with the
    tolerant adapter the first reply is used and no parse failure is counted."""
    inputs = {"question": "Who won the final?", "ambiguity_type": "AmbTime",
              "reason": "which year"}
    json_retry = '{"interpretations": ["Who won in 2018?"]}'
    for adapter, calls, failures in ((dspy.ChatAdapter(), 2, 1),
                                     (ListTolerantChatAdapter(), 1, 0)):
        lm = scripted_lm({"PseudoInterpretations": [MARKDOWN_REPLY, json_retry]})
        with dspy.context(lm=lm, adapter=adapter, callbacks=[default_callback()]), \
                track() as t:
            pred = dspy.Predict(PseudoInterpretations)(**inputs)
        assert lm.engine.count("PseudoInterpretations") == calls
        assert t.format_retries == failures
        assert pred.interpretations[0] in ("Who won the 2018 final?", "Who won in 2018?")


def test_configure_installs_it_unless_an_adapter_is_given() -> None:
    import ambiqa

    lm = scripted_lm({})
    before = {k: dspy.settings.get(k) for k in ("lm", "adapter", "callbacks", "usage_tracker")}
    try:
        ambiqa.configure(lm)
        assert isinstance(dspy.settings.adapter, ListTolerantChatAdapter)
        mine = dspy.JSONAdapter()
        ambiqa.configure(lm, adapter=mine)
        assert dspy.settings.adapter is mine
    finally:
        dspy.configure(**before)


def test_streaming_still_works_with_it() -> None:
    """DSPy's StreamListener knows adapters by class name; a differently named subclass was
    refused ("Unsupported adapter for streaming")."""
    import asyncio

    from dspy.streaming import StreamListener

    lm = scripted_lm({"PseudoInterpretations": MARKDOWN_REPLY})
    program = dspy.streamify(dspy.Predict(PseudoInterpretations),
                             stream_listeners=[StreamListener("interpretations")])

    async def run() -> list[object]:
        out = []
        async for item in program(question="q", ambiguity_type="AmbTime", reason="r"):
            out.append(item)
        return out

    with dspy.context(lm=lm, adapter=ListTolerantChatAdapter()):
        items = asyncio.run(run())
    assert isinstance(items[-1], dspy.Prediction)
    assert items[-1].interpretations == ["Who won the 2018 final?", "Who won the 2019 final?"]
