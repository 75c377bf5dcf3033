"""VanillaRAG and ClosedBook control flow with the scripted LM."""

from __future__ import annotations

import pytest

from ambiqa.errors import ConfigError
from ambiqa.programs.closed_book import ClosedBook
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import scripted_lm
from ambiqa.types import Passage

PASSAGES = [
    Passage("a", "James and Oliver Phelps", "James and Oliver Phelps played Fred and George "
            "Weasley in the Harry Potter films."),
    Passage("b", "Chris Rankin", "Chris Rankin played Percy Weasley in the Harry Potter films."),
    Passage("c", "Paris", "Paris is the capital of France."),
]


def test_vanilla_rag_cites_passages_and_counts_calls(use_lm):
    lm = use_lm(scripted_lm({
        "ClarifyFromPassages": {"pairs": [
            {"question": "Who played Fred and George Weasley?", "answer": "James and Oliver Phelps",
             "passage": 1},
            {"question": "Who played Percy Weasley?", "answer": "Chris Rankin", "passage": 2},
            {"question": "Who played Percy Weasley?", "answer": "Chris Rankin", "passage": 2},
            {"question": "Bad citation?", "answer": "x", "passage": 9},
        ]},
        "WriteLongAnswer": {"long_answer": "Several actors played Weasley brothers."},
    }))
    prog = VanillaRAG(InMemoryRetriever(PASSAGES), k=2)
    out = prog(question="Who played the Weasley brothers?")
    assert [i["answer"] for i in out.interpretations] == [
        "James and Oliver Phelps", "Chris Rankin", "x"]
    assert out.interpretations[0]["passages"] == ["a"]
    assert out.interpretations[2]["passages"] == []  # passage 9 does not exist: no citation
    assert out.answer == "Several actors played Weasley brothers."
    assert len(out.passages) == 2
    assert out.trace["lm_calls"] == 2 and out.trace["retriever_calls"] == 1
    assert out.trace["calls_by_module"] == {"ClarifyFromPassages": 1, "WriteLongAnswer": 1}
    assert lm.engine.count("ClarifyFromPassages") == 1


def test_unparseable_clarify_degrades_not_crashes(use_lm):
    use_lm(scripted_lm({"ClarifyFromPassages": "no fields here at all",
                        "WriteLongAnswer": {"long_answer": "fallback answer"}}))
    out = VanillaRAG(InMemoryRetriever(PASSAGES))(question="Who played Percy?")
    assert out.interpretations == []
    assert out.answer == "fallback answer"
    assert any("clarify" in e for e in out.trace["events"])


def test_closed_book_makes_one_call_and_no_retrieval(use_lm):
    use_lm(scripted_lm({"ClosedBookLongAnswer": {"long_answer": "Paris."}}))
    out = ClosedBook()(question="What is the capital of France?")
    assert out.answer == "Paris."
    assert out.trace["lm_calls"] == 1 and out.trace["retriever_calls"] == 0


@pytest.mark.parametrize("bad", ["", "   \n", 42, None, "x" * 50_000])
def test_bad_questions_are_rejected_clearly(bad, use_lm):
    use_lm(scripted_lm({}))
    with pytest.raises(ConfigError):
        VanillaRAG(InMemoryRetriever(PASSAGES))(question=bad)


def test_missing_retriever_is_a_clear_error(use_lm):
    use_lm(scripted_lm({"ClarifyFromPassages": {"pairs": []}}))
    with pytest.raises(ConfigError, match="needs a retriever"):
        VanillaRAG()(question="Who?")


# ---- safe_step degrades only on the errors it means (issue 12 item 16) -------------------------


def test_safe_step_degrades_on_parse_failures_only():
    import pytest
    from dspy.utils.exceptions import AdapterParseError, LMTimeoutError

    from ambiqa.programs.base import safe_step
    from ambiqa.tracing import track

    def raises(exc):
        def fn():
            raise exc
        return fn

    with track() as t:
        from ambiqa.signatures.answering import ShortAnswer

        parse = AdapterParseError(adapter_name="ChatAdapter", signature=ShortAnswer,
                                  lm_response="x")
        assert safe_step("a", raises(parse), "D") == "D"
        # an LM that never replied fails the question, it is not answered around (issue 33)
        with pytest.raises(LMTimeoutError):
            safe_step("b", raises(LMTimeoutError("slow")), "D")
    assert [e.split(":")[0] for e in t.events] == ["a"]
    # a bug in our own code is not a degraded step: it raises
    for bug in (ValueError("bad index"), KeyError("passages"), TypeError("not callable")):
        with pytest.raises(type(bug)):
            safe_step("c", raises(bug), "D")


def test_short_form_answers_in_one_call_from_the_retrieved_passages(use_lm):
    """Short form (HotpotQA/NQ/WebQ): retrieve, then one ShortAnswer call that sees them."""
    seen = {}

    def short(inputs):
        seen.update(inputs)
        return {"answer": "  Chris Rankin. "}

    lm = use_lm(scripted_lm({"ShortAnswer": short}))
    prog = VanillaRAG(InMemoryRetriever(PASSAGES), k=2, answer_form="short")
    out = prog(question="Who played Percy Weasley?")
    assert out.answer == "Chris Rankin."
    assert "Chris Rankin played Percy" in seen["passages"]
    assert out.trace["lm_calls"] == 1 and out.trace["retriever_calls"] == 1
    assert lm.engine.count("ClarifyFromPassages") == 0
    assert prog.config() == {"k": 2, "answer_form": "short", "recall_fallback": False}
    assert prog.answer_style == "short" and prog.min_lm_rounds == 1
    # only the predictor the form uses exists, so compiled state names what was tuned
    assert [n for n, _ in prog.named_predictors()] == ["short_answer.answer"]


def test_recall_fallback_keeps_an_answer_the_passages_give(use_lm):
    """recall_fallback=True: the passages are read by the prompt that may say "unknown"; a
    real answer from them is kept and no closed-book call is made."""
    seen = {}

    def read(inputs):
        seen.update(inputs)
        return {"answer": "Chris Rankin"}

    lm = use_lm(scripted_lm({"ShortAnswerOrUnknown": read, "ShortAnswer": {"answer": "x"}}))
    prog = VanillaRAG(InMemoryRetriever(PASSAGES), k=2, answer_form="short",
                      recall_fallback=True)
    out = prog(question="Who played Percy Weasley?")
    assert out.answer == "Chris Rankin"
    assert "Chris Rankin played Percy" in seen["passages"]
    assert lm.engine.count("ShortAnswerOrUnknown") == 1 and lm.engine.count("ShortAnswer") == 0
    assert out.trace["lm_calls"] == 1 and out.trace["retriever_calls"] == 1
    assert prog.config()["recall_fallback"] is True
    assert not any("recall fallback" in e for e in out.trace["events"])


@pytest.mark.parametrize("reply", ["unknown", "Unknown.", "", "Percy Weasley"])
def test_recall_fallback_answers_closed_book_when_the_passages_give_no_answer(use_lm, reply):
    """"unknown", an empty reply, or only the question's own words: one closed-book
    ShortAnswer call (no passages) answers instead, and the trace says so."""
    seen = {}

    def recall(inputs):
        seen.update(inputs)
        return {"answer": "Chris Rankin"}

    lm = use_lm(scripted_lm({"ShortAnswerOrUnknown": {"answer": reply},
                             "ShortAnswer": recall}))
    prog = VanillaRAG(InMemoryRetriever(PASSAGES), k=2, answer_form="short",
                      recall_fallback=True)
    out = prog(question="Who played Percy Weasley?")
    assert out.answer == "Chris Rankin"
    assert seen["passages"].startswith("(no passages)")
    assert lm.engine.count("ShortAnswerOrUnknown") == 1 and lm.engine.count("ShortAnswer") == 1
    assert out.trace["lm_calls"] == 2
    assert any("recall fallback" in e for e in out.trace["events"])
    # the passages the program read are still reported (retrieval metrics see them)
    assert len(out.passages) == 2


def test_without_recall_fallback_the_passages_answer_is_final(use_lm):
    lm = use_lm(scripted_lm({"ShortAnswer": {"answer": "unknown"}}))
    out = VanillaRAG(InMemoryRetriever(PASSAGES), k=2, answer_form="short")(
        question="Who played Percy Weasley?")
    assert out.answer == "unknown" and lm.engine.count("ShortAnswer") == 1


@pytest.mark.parametrize(("answer", "question", "expected"), [
    ("Australia", "what language do the people speak in australia?", True),
    ("The Dell", "who invented dell computer?", True),
    ("Michael Dell", "who invented dell computer?", False),
    ("2001", "what happened in 2001?", True),
    ("2001", "when did it happen, in 20th century?", False),
    ("None", "what are the gods of islam?", True),
    ("Allah", "what are the gods of islam?", False),
])
def test_is_non_answer(answer, question, expected):
    from ambiqa.programs.steps import is_non_answer

    assert is_non_answer(answer, question) is expected


def test_recall_fallback_with_the_long_form_is_a_clear_error():
    with pytest.raises(ConfigError, match="recall_fallback applies to answer_form='short'"):
        VanillaRAG(InMemoryRetriever(PASSAGES), recall_fallback=True)


def test_closed_book_short_form_reads_no_passages(use_lm):
    seen = {}

    def short(inputs):
        seen.update(inputs)
        return {"answer": "Paris"}

    use_lm(scripted_lm({"ShortAnswer": short}))
    prog = ClosedBook(answer_form="short")
    out = prog(question="What is the capital of France?")
    assert out.answer == "Paris" and out.passages == []
    assert seen["passages"].startswith("(no passages)")
    assert out.trace["retriever_calls"] == 0
    assert ClosedBook().config() == {"answer_form": "long"}


@pytest.mark.parametrize("cls", [ClosedBook, VanillaRAG])
def test_unknown_answer_form_is_a_clear_error(cls):
    with pytest.raises(ConfigError, match="answer_form must be one of long, short, got 'brief'"):
        cls(answer_form="brief")
