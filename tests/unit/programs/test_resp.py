"""ReSP control flow (Algorithm 1) pinned with the scripted LM and a query-recording retriever."""

from __future__ import annotations

import json

import pytest

from ambiqa.errors import ConfigError
from ambiqa.programs.registry import build_program
from ambiqa.programs.resp import ReSP, normalize_question
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import RecordingRetriever, scripted_lm
from ambiqa.types import Passage

Q = "What is the capital of the country where the Eiffel Tower stands?"
SUB1 = "In which country is the Eiffel Tower?"
SUB2 = "What is the capital of France?"

PASSAGES = [
    Passage("eiffel", "Eiffel Tower", "The Eiffel Tower is a wrought-iron tower in Paris, France."),
    Passage("france", "France", "France is a country in Western Europe. Its capital is Paris."),
    Passage("berlin", "Berlin", "Berlin is the capital of Germany."),
    Passage("tower", "Tower of London", "The Tower of London is a castle in London."),
]

SIGS = ("SummarizeGlobalEvidence", "SummarizeLocalPathway", "JudgeSufficiency",
        "PlanNextQuestion", "AnswerFromMemories")


def handlers(**over):
    base = {
        "SummarizeGlobalEvidence": {"evidence": "The Eiffel Tower is in Paris, France."},
        "SummarizeLocalPathway": lambda inp: {"answer": f"answer to {inp['sub_question']}"},
        "JudgeSufficiency": {"sufficient": False},
        "PlanNextQuestion": [{"next_question": SUB1}, {"next_question": SUB2}],
        "AnswerFromMemories": {"answer": "Paris"},
    }
    base.update(over)
    return base


def counts(lm) -> dict[str, int]:
    return {s: lm.engine.count(s) for s in SIGS}


def run(use_lm, max_iter=3, k=2, **over):
    lm = use_lm(scripted_lm(handlers(**over)))
    retriever = RecordingRetriever(InMemoryRetriever(PASSAGES))
    out = ReSP(retriever, k=k, max_iter=max_iter)(question=Q)
    return lm, retriever, out


def test_one_iteration_when_judge_is_satisfied(use_lm):
    lm, retriever, out = run(use_lm, JudgeSufficiency={"sufficient": True})
    assert counts(lm) == {"SummarizeGlobalEvidence": 1, "SummarizeLocalPathway": 0,
                          "JudgeSufficiency": 1, "PlanNextQuestion": 0,
                          "AnswerFromMemories": 1}
    assert retriever.queries == [Q]
    assert out.iterations == 1 and out.stop_reason == "sufficient"
    assert out.answer == "Paris"
    step = out.trajectory[0]
    assert step["sub_question"] == Q and step["local_summary"] is None
    assert step["sufficient"] is True and len(step["passage_ids"]) == 2
    assert step["global_summary"] == "The Eiffel Tower is in Paris, France."
    assert out.interpretations == [{"question": Q, "answer": "Paris",
                                    "passages": step["passage_ids"]}]
    assert out.trace["lm_calls"] == 3 and out.trace["retriever_calls"] == 1


def test_two_iterations_exact_calls_and_memories(use_lm):
    lm, retriever, out = run(use_lm, JudgeSufficiency=[{"sufficient": False},
                                                       {"sufficient": True}])
    assert counts(lm) == {"SummarizeGlobalEvidence": 2, "SummarizeLocalPathway": 1,
                          "JudgeSufficiency": 2, "PlanNextQuestion": 1,
                          "AnswerFromMemories": 1}
    assert retriever.queries == [Q, SUB1]
    assert out.iterations == 2 and out.stop_reason == "sufficient"
    assert out.trajectory[0]["next_sub_question"] == SUB1
    assert out.trajectory[1]["local_summary"] == f"answer to {SUB1}"
    assert out.local_pathway == [{"question": SUB1, "answer": f"answer to {SUB1}"}]
    # The global summarizer always writes for the overarching question, never the sub-question.
    for sig, inputs in lm.engine.calls:
        if sig == "SummarizeGlobalEvidence":
            assert inputs["question"] == Q
    # The generator reads both memories.
    gen_inputs = next(i for s, i in lm.engine.calls if s == "AnswerFromMemories")
    assert SUB1 in gen_inputs["local_pathway"]
    assert gen_inputs["global_evidence"].count("[round") == 2
    # Passages from both rounds, no duplicates.
    ids = [p["id"] for p in out.passages]
    assert len(ids) == len(set(ids))
    assert out.trace["calls_by_module"]["AnswerFromMemories"] == 1


def test_local_pathway_never_in_round_one(use_lm):
    lm, _, out = run(use_lm)
    assert out.trajectory[0]["local_summary"] is None
    subs = [i["sub_question"] for s, i in lm.engine.calls if s == "SummarizeLocalPathway"]
    assert subs == [SUB1, SUB2]  # one per later round, never the overarching question
    assert all(step["local_summary"] for step in out.trajectory[1:])


def test_stops_at_max_iter_and_skips_useless_last_judge(use_lm):
    lm, retriever, out = run(use_lm, max_iter=3)
    assert out.iterations == 3 and out.stop_reason == "max_iter"
    assert retriever.queries == [Q, SUB1, SUB2]
    assert counts(lm) == {"SummarizeGlobalEvidence": 3, "SummarizeLocalPathway": 2,
                          "JudgeSufficiency": 2, "PlanNextQuestion": 2,
                          "AnswerFromMemories": 1}
    assert out.trajectory[-1]["sufficient"] is None


def test_max_iter_one_is_plain_summarize_then_answer(use_lm):
    lm, retriever, out = run(use_lm, max_iter=1)
    assert retriever.queries == [Q]
    assert counts(lm) == {"SummarizeGlobalEvidence": 1, "SummarizeLocalPathway": 0,
                          "JudgeSufficiency": 0, "PlanNextQuestion": 0,
                          "AnswerFromMemories": 1}


def test_planner_repeat_is_reasked_with_a_note_then_continues(use_lm):
    # Round 1: the planner first proposes the overarching question itself (reworded only by
    # case and punctuation), is told so, then proposes a real sub-question.
    lm, retriever, out = run(use_lm, PlanNextQuestion=[
        {"next_question": Q.upper().rstrip("?") + " ?!"},
        {"next_question": SUB1},
        {"next_question": SUB2},
    ])
    assert retriever.queries == [Q, SUB1, SUB2]
    # The last input field also carries DSPy's trailing "Respond with ..." line: cut it.
    plans = [{k: v.split("\n\nRespond with")[0] for k, v in i.items()}
             for s, i in lm.engine.calls if s == "PlanNextQuestion"]
    assert len(plans) == 3
    assert plans[0]["feedback"] == "none"
    assert "repeats" in plans[1]["feedback"] and Q.upper().rstrip("?") in plans[1]["feedback"]
    assert plans[2]["feedback"] == "none"  # a fresh round starts without the note
    assert Q in plans[2]["searched"] and SUB1 in plans[2]["searched"]
    assert out.trajectory[0]["rejected_sub_questions"] == [Q.upper().rstrip("?") + " ?!"]
    assert any("repeated" in e for e in out.trace["events"])


def test_planner_that_keeps_repeating_stops_and_answers(use_lm):
    lm, retriever, out = run(use_lm, PlanNextQuestion=[
        {"next_question": SUB1},
        {"next_question": "in which country is THE eiffel tower"},
        {"next_question": "- In which country is the Eiffel Tower ?"},
        {"next_question": "never reached"},
    ])
    assert out.stop_reason == "planner_repeated"
    assert retriever.queries == [Q, SUB1]
    normalized = [normalize_question(q) for q in retriever.queries]
    assert len(normalized) == len(set(normalized))
    assert lm.engine.count("PlanNextQuestion") == 3  # one plan, then a proposal + one re-ask
    assert lm.engine.count("AnswerFromMemories") == 1
    assert out.answer == "Paris"
    assert len(out.trajectory[1]["rejected_sub_questions"]) == 2


@pytest.mark.parametrize("sub", [SUB1, "what is the capital of the country where the eiffel "
                                       "tower stands", "  WHAT is  capital of THE country where "
                                       "Eiffel Tower stands?? "])
def test_normalization_treats_rewordings_of_case_and_articles_as_repeats(sub):
    assert normalize_question(sub) in {normalize_question(Q), normalize_question(SUB1)}


def test_never_searches_same_normalized_question_twice(use_lm):
    # A planner stuck on one idea, worded slightly differently every time.
    lm, retriever, out = run(use_lm, max_iter=3, PlanNextQuestion=lambda inp: {
        "next_question": SUB1 if SUB1 not in inp["searched"] else SUB1.lower().rstrip("?")})
    normalized = [normalize_question(q) for q in retriever.queries]
    assert len(normalized) == len(set(normalized))
    assert out.stop_reason == "planner_repeated"


def test_unparseable_judge_counts_as_insufficient(use_lm):
    lm, retriever, out = run(use_lm, max_iter=2, JudgeSufficiency="no fields at all")
    assert retriever.queries == [Q, SUB1]  # kept searching
    assert out.trajectory[0]["sufficient"] is None
    assert any("resp.judge" in e for e in out.trace["events"])
    assert lm.engine.count("AnswerFromMemories") == 1


def test_unparseable_planner_stops_and_answers(use_lm):
    lm, retriever, out = run(use_lm, PlanNextQuestion="garbage without fields")
    assert out.stop_reason == "planner_unparseable"
    assert retriever.queries == [Q] and out.iterations == 1
    assert out.answer == "Paris"
    assert any("resp.plan" in e for e in out.trace["events"])


def test_empty_plan_stops(use_lm):
    _, retriever, out = run(use_lm, PlanNextQuestion={"next_question": "  "})
    assert out.stop_reason == "planner_unparseable" and retriever.queries == [Q]


def test_unparseable_generator_gives_empty_answer_not_crash(use_lm):
    _, _, out = run(use_lm, max_iter=1, AnswerFromMemories="??")
    assert out.answer == ""
    assert any("resp.generate" in e for e in out.trace["events"])


def test_unparseable_local_summary_is_unknown(use_lm):
    _, _, out = run(use_lm, max_iter=2, SummarizeLocalPathway="??")
    assert out.trajectory[1]["local_summary"] == "unknown"


def test_prediction_is_json_serializable_and_registered(use_lm):
    use_lm(scripted_lm(handlers()))
    prog = build_program("resp", retriever=RecordingRetriever(InMemoryRetriever(PASSAGES)), k=2,
                         max_iter=2)
    assert prog.answer_style == "short" and prog.config() == {"k": 2, "max_iter": 2}
    out = prog(question=Q)
    json.dumps({k: out[k] for k in ("trajectory", "iterations", "interpretations",
                                     "passages", "answer", "stop_reason", "trace")})


@pytest.mark.parametrize("kwargs", [{"k": 0}, {"max_iter": 0}, {"max_iter": 1.5},
                                    {"k": True}])
def test_bad_settings_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        ReSP(RecordingRetriever(InMemoryRetriever(PASSAGES)), **kwargs)


def test_missing_retriever_is_clear(use_lm):
    use_lm(scripted_lm(handlers()))
    with pytest.raises(ConfigError, match="needs a retriever"):
        ReSP()(question=Q)


@pytest.mark.parametrize("over", [
    {"JudgeSufficiency": {"sufficient": True}},
    {"JudgeSufficiency": [{"sufficient": False}, {"sufficient": True}]},
    {},  # runs to max_iter
    {"PlanNextQuestion": {"next_question": Q}},  # always repeats
    {"PlanNextQuestion": "unparseable"},
    {"JudgeSufficiency": "unparseable"},
    {"SummarizeGlobalEvidence": "unparseable", "SummarizeLocalPathway": "unparseable"},
])
def test_generator_is_called_exactly_once_on_every_path(use_lm, over):
    lm, _, out = run(use_lm, **over)
    assert lm.engine.count("AnswerFromMemories") == 1
    assert out.answer == "Paris"


def test_judge_and_local_summarizer_receive_what_the_paper_gives_them(use_lm):
    """Table 1 / Alg. 1: the judge reads the overarching question and both memory queues, never
    raw passages; the local summarizer reads the round's sub-question and that round's docs."""
    lm, retriever, out = run(use_lm, JudgeSufficiency=[{"sufficient": False},
                                                       {"sufficient": True}])
    judges = [i for s, i in lm.engine.calls if s == "JudgeSufficiency"]
    assert len(judges) == 2
    assert all(set(j) >= {"question", "global_evidence", "local_pathway"} for j in judges)
    assert all("passages" not in j for j in judges)
    assert all(j["question"] == Q for j in judges)
    # round 2's judge sees round 2's local memory entry and both global notes
    assert f"- {SUB1} -> answer to {SUB1}" in judges[1]["local_pathway"]
    assert judges[1]["global_evidence"].count("[round") == 2
    assert judges[0]["local_pathway"].startswith("(none yet)")
    for p in PASSAGES:  # no passage text leaks into the judge
        assert p.text not in judges[1]["global_evidence"] + judges[1]["local_pathway"]
    (local,) = [i for s, i in lm.engine.calls if s == "SummarizeLocalPathway"]
    assert local["sub_question"] == SUB1
    round2 = out.trajectory[1]["passage_ids"]
    texts = {p.id: p.text for p in PASSAGES}
    for pid in texts:
        assert (texts[pid] in local["passages"]) == (pid in round2)
