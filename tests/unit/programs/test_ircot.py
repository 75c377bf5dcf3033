"""IRCoT-style baseline control flow with the scripted LM and a query-recording retriever."""

from __future__ import annotations

import json

import pytest

from ambiqa.errors import ConfigError
from ambiqa.programs.ircot import IRCoT, first_sentence, says_answer
from ambiqa.programs.registry import build_program
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import RecordingRetriever, scripted_lm
from ambiqa.types import Passage

Q = "What is the capital of the country where the Eiffel Tower stands?"
S1 = "The Eiffel Tower stands in Paris, France."
S2 = "The capital of France is Paris."
S_END = "So the answer is: Paris."

PASSAGES = [
    Passage("eiffel", "Eiffel Tower", "The Eiffel Tower is a wrought-iron tower in Paris, France."),
    Passage("france", "France", "France is a country in Western Europe. Its capital is Paris."),
    Passage("berlin", "Berlin", "Berlin is the capital of Germany."),
    Passage("tower", "Tower of London", "The Tower of London is a castle in London."),
    Passage("capital", "Capital city", "A capital city is the seat of a country's government."),
]


def run(use_lm, reason, max_steps=4, k=2, max_passages=15, read=None):
    lm = use_lm(scripted_lm({
        "NextReasoningStep": reason,
        "AnswerFromReasoning": read or {"answer": "Paris"},
    }))
    retriever = RecordingRetriever(InMemoryRetriever(PASSAGES))
    out = IRCoT(retriever, k=k, max_steps=max_steps, max_passages=max_passages)(question=Q)
    return lm, retriever, out


def test_stops_when_the_chain_states_the_answer(use_lm):
    lm, retriever, out = run(use_lm, [{"next_sentence": S1}, {"next_sentence": S_END},
                                      {"next_sentence": "never reached"}], max_steps=5)
    assert out.stop_reason == "answer_found"
    assert out.reasoning == [S1, S_END]
    assert lm.engine.count("NextReasoningStep") == 2
    assert lm.engine.count("AnswerFromReasoning") == 1
    assert retriever.queries == [Q, S1]  # the question, then each non-final sentence
    assert out.answer == "Paris"
    assert out.trace["lm_calls"] == 3 and out.trace["retriever_calls"] == 2


def test_max_steps_is_respected(use_lm):
    lm, retriever, out = run(use_lm, [{"next_sentence": S1}, {"next_sentence": S2},
                                      {"next_sentence": "Paris is large."}], max_steps=3)
    assert out.stop_reason == "max_steps" and out.iterations == 3
    assert lm.engine.count("NextReasoningStep") == 3
    assert lm.engine.count("AnswerFromReasoning") == 1
    assert retriever.queries == [Q, S1, S2]


def test_passages_are_deduplicated_and_accumulate(use_lm):
    lm, _, out = run(use_lm, [{"next_sentence": S1}, {"next_sentence": S2},
                              {"next_sentence": S_END}], k=3)
    ids = [p["id"] for p in out.passages]
    assert len(ids) == len(set(ids))
    new_ids = [i for step in out.steps for i in step["new_passage_ids"]]
    assert len(new_ids) == len(set(new_ids))
    assert not set(new_ids) & set(ids[:3])  # the first search's passages are never "new"
    # Each reasoning step sees every passage collected so far, numbered once.
    # The last input field also carries DSPy's trailing "Respond with ..." line: cut it.
    reason_inputs = [{k: v.split("\n\nRespond with")[0] for k, v in i.items()}
                     for s, i in lm.engine.calls if s == "NextReasoningStep"]
    sizes = [i["passages"].count("\n") + 1 for i in reason_inputs]
    assert sizes == sorted(sizes) and sizes[-1] == len(ids)
    assert reason_inputs[0]["reasoning"] == "(none yet)"
    assert reason_inputs[2]["reasoning"] == f"{S1}\n{S2}"
    assert out.interpretations[0]["passages"] == ids


def test_passage_cap(use_lm):
    _, _, out = run(use_lm, [{"next_sentence": S1}, {"next_sentence": S2},
                             {"next_sentence": S_END}], k=3, max_passages=4)
    assert len(out.passages) == 4


def test_only_the_first_sentence_is_kept(use_lm):
    _, retriever, out = run(use_lm, [{"next_sentence": f"{S1} {S_END}\nmore"},
                                     {"next_sentence": S_END}])
    assert out.reasoning == [S1, S_END]
    assert retriever.queries == [Q, S1]


@pytest.mark.parametrize("text,expected", [
    ("The U.S. Army was founded in 1775. So the answer is: 1775.",
     "The U.S. Army was founded in 1775."),
    ("\n\n  - Paris is in France.\nNext", "Paris is in France."),
    ("", ""),
])
def test_first_sentence(text, expected):
    assert first_sentence(text) == expected


def test_says_answer():
    assert says_answer("So the answer is: Paris.") and says_answer("Thus the ANSWER  IS 3")
    assert not says_answer("The answers came in 1990.")


def test_unparseable_reasoning_stops_and_reader_still_answers(use_lm):
    lm, retriever, out = run(use_lm, [{"next_sentence": S1}, "garbage"])
    assert out.stop_reason == "reasoner_unparseable"
    assert out.reasoning == [S1]
    assert lm.engine.count("AnswerFromReasoning") == 1
    assert out.answer == "Paris"
    assert any("ircot.reason" in e for e in out.trace["events"])


def test_unparseable_reader_gives_empty_answer(use_lm):
    _, _, out = run(use_lm, {"next_sentence": S_END}, read="??")
    assert out.answer == "" and any("ircot.read" in e for e in out.trace["events"])


def test_registered_and_serializable(use_lm):
    use_lm(scripted_lm({"NextReasoningStep": {"next_sentence": S_END},
                        "AnswerFromReasoning": {"answer": "Paris"}}))
    prog = build_program("ircot", retriever=RecordingRetriever(InMemoryRetriever(PASSAGES)), k=2)
    assert prog.answer_style == "short"
    assert prog.config() == {"k": 2, "max_steps": 4, "max_passages": 15}
    out = prog(question=Q)
    json.dumps({k: out[k] for k in ("steps", "reasoning", "interpretations", "passages",
                                     "answer", "stop_reason", "trace")})


@pytest.mark.parametrize("kwargs", [{"k": 0}, {"max_steps": 0}, {"max_passages": -1}])
def test_bad_settings_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        IRCoT(RecordingRetriever(InMemoryRetriever(PASSAGES)), **kwargs)
