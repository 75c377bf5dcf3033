"""Diva (Algorithm 1) and the query-refinement baseline, with the scripted LM.

A fake encoder with hand-made vectors stands in for SentenceBERT, so the pruning order is known
exactly; a recording retriever shows which queries were searched.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from ambiqa.errors import ConfigError
from ambiqa.programs.diva import Diva, clean_interpretations
from ambiqa.programs.query_refinement import QueryRefinementClosedBook
from ambiqa.programs.registry import build_program
from ambiqa.testing import KeywordEncoder, ScriptedRetriever, scripted_lm
from ambiqa.types import Passage

Q = "Who played the Weasley brothers in Harry Potter?"
RON = "Who played Ron Weasley in Harry Potter?"
PERCY = "Who played Percy Weasley in Harry Potter?"
FRED = "Who played Fred Weasley in Harry Potter?"


def _p(pid: str, text: str) -> Passage:
    return Passage(pid, f"Title {pid}", text)


PASSAGES = {
    "ron": _p("ron", "Rupert Grint played Ron Weasley."),
    "percy": _p("percy", "Chris Rankin played Percy Weasley."),
    "fred": _p("fred", "James Phelps played Fred Weasley."),
    "both": _p("both", "The Weasley brothers were played by several actors."),
    "noise": _p("noise", "Paris is the capital of France."),
}


def recording_retriever(results: dict[str, list[str]],
                        default: Sequence[str] = ()) -> ScriptedRetriever:
    """Scripted passage ids per query over PASSAGES; records every search."""
    return ScriptedRetriever(PASSAGES, results, default)


def fake_encoder(vectors: dict[str, Sequence[float]], dim: int = 3) -> KeywordEncoder:
    """Looks each text up by a key it contains; unknown texts get a vector of ones."""
    return KeywordEncoder(vectors, fallback=[1.0] * dim)


def _value(inp: dict, name: str) -> str:
    """An input field's text without the adapter's closing "Respond with ..." line, which
    follows the last input field of the user message."""
    return inp[name].split("\n\nRespond with")[0]


def _handlers(readings: list[str], supported: set[str], kind: str = "AmbObj") -> dict:
    return {
        "TypeAmbiguity": {"reason": "'Weasley brothers' names several characters.",
                          "ambiguity_type": kind},
        "PseudoInterpretations": {"interpretations": readings},
        "VerifyRetrieval": lambda inp: {
            "evidence": "[1] quoted" if _value(inp, "interpretation") in supported else "none",
            "verdict": "yes" if _value(inp, "interpretation") in supported else "no"},
        "ClarifyFromPassages": {"pairs": [
            {"question": RON, "answer": "Rupert Grint", "passage": 1},
            {"question": PERCY, "answer": "Chris Rankin", "passage": 2}]},
        "WriteLongAnswer": {"long_answer": "Several actors played Weasley brothers."},
        "ClosedBookLongAnswer": {"long_answer": "From memory: Rupert Grint and others."},
    }


def _retriever() -> ScriptedRetriever:
    return recording_retriever({RON: ["ron", "both"], PERCY: ["percy", "both"],
                               FRED: ["fred", "noise"], Q: ["both", "noise"]})


def _diva(**kw) -> Diva:
    kw.setdefault("encoder", fake_encoder({}))
    return Diva(kw.pop("retriever", None) or _retriever(), **kw)


# ---- adaptive generation paths -------------------------------------------------------------


def test_useless_takes_closed_book_path_without_clarify(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported=set())))
    out = _diva()(question=Q)
    assert out.verdict == "Useless" and out.path == "closed_book"
    assert out.answer == "From memory: Rupert Grint and others."
    assert out.interpretations == []
    assert out.pseudo_interpretations == [RON, PERCY]
    assert [v["supported"] for v in out.votes] == [False, False]
    assert lm.engine.count("ClarifyFromPassages") == 0
    assert lm.engine.count("WriteLongAnswer") == 0
    assert lm.engine.count("ClosedBookLongAnswer") == 1
    # the passages read for verification are still reported
    assert {p["id"] for p in out.passages} == {"ron", "percy", "both"}


def test_useful_when_every_interpretation_is_supported(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON, PERCY})))
    out = _diva(top_k=2)(question=Q)
    assert out.verdict == "Useful" and out.path == "rag"
    assert out.answer == "Several actors played Weasley brothers."
    assert lm.engine.count("ClosedBookLongAnswer") == 0
    assert lm.engine.count("ClarifyFromPassages") == 1
    # Clarify reads the question itself (eq. 1) and exactly the kept passages
    (clarify_inputs,) = [inp for sig, inp in lm.engine.calls if sig == "ClarifyFromPassages"]
    assert Q in clarify_inputs["question"]
    kept = [p["id"] for p in out.passages]
    assert len(kept) == 2
    for pid in kept:
        assert PASSAGES[pid].text in clarify_inputs["passages"]
    # cited numbers map to ids of the kept passages
    assert out.interpretations[0]["passages"] == [kept[0]]
    assert out.interpretations[1]["passages"] == [kept[1]]


def test_partial_useful_still_takes_rag_path(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY, FRED], supported={PERCY})))
    out = _diva()(question=Q)
    assert out.verdict == "PartialUseful" and out.path == "rag"
    assert [v["supported"] for v in out.votes] == [False, True, False]
    assert lm.engine.count("WriteLongAnswer") == 1
    assert lm.engine.count("ClosedBookLongAnswer") == 0


def test_one_verification_and_one_search_per_interpretation(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY, FRED], supported={RON})))
    retriever = _retriever()
    out = _diva(retriever=retriever, k_per_query=2)(question=Q)
    assert lm.engine.count("VerifyRetrieval") == 3
    asked = sorted(_value(inp, "interpretation") for sig, inp in lm.engine.calls
                   if sig == "VerifyRetrieval")
    assert asked == sorted([RON, PERCY, FRED])
    # eq. 4 unions over the interpretations; the question is not searched on its own
    assert retriever.searches == [(RON, 2), (PERCY, 2), (FRED, 2)]
    assert out.trace["retriever_calls"] == 3
    assert out.trace["calls_by_module"]["VerifyRetrieval"] == 3
    assert out.trace["lm_calls"] == 2 + 3 + 2  # type + rewrite, 3 verifications, clarify + write


def test_verifications_run_concurrently(use_lm, monkeypatch):
    """Three verifications meet at a barrier: run one after another, the first would wait
    for the others forever (here: until the timeout) and record a failure."""
    import threading

    monkeypatch.setenv("AMBIQA_PARALLEL", "4")
    barrier = threading.Barrier(3)
    missed: list[str] = []

    def verify(inp):
        try:
            barrier.wait(timeout=10)
        except threading.BrokenBarrierError:
            missed.append(_value(inp, "interpretation"))
        return {"evidence": "none", "verdict": "yes"}

    handlers = _handlers([RON, PERCY, FRED], supported=set())
    handlers["VerifyRetrieval"] = verify
    use_lm(scripted_lm(handlers))
    out = _diva()(question=Q)
    assert missed == []
    assert out.verdict == "Useful"


# ---- diversification and pruning ------------------------------------------------------------


def test_pruning_keeps_highest_mean_cosine_not_highest_max():
    # The two interpretations are orthogonal; "both" sits between them.
    encoder = fake_encoder({
        RON: [1, 0, 0], PERCY: [0, 1, 0],
        PASSAGES["ron"].text: [1, 0, 0], PASSAGES["both"].text: [1, 1, 0],
        PASSAGES["fred"].text: [0.99, 0.0, 0.141], PASSAGES["noise"].text: [0, 0, 1],
        PASSAGES["percy"].text: [0.2, 0.8, 0.56],
    })
    prog = Diva(recording_retriever({}), top_k=2, encoder=encoder)
    pool = [PASSAGES[i] for i in ["noise", "fred", "ron", "percy", "both"]]
    kept = prog.prune([RON, PERCY], pool)
    scores = {p.id: p.score for p in kept}
    # means: both 0.707, percy 0.502, ron 0.500, fred 0.495, noise 0; a max-cosine rule
    # would keep ron (1.0) and fred (0.99) instead
    assert [p.id for p in kept] == ["both", "percy"]
    assert scores["both"] == pytest.approx(np.sqrt(0.5))
    assert scores["percy"] == pytest.approx((0.2 + 0.8) / 2 / np.linalg.norm([0.2, 0.8, 0.56]))
    prog.top_k = 5
    assert [p.id for p in prog.prune([RON, PERCY], pool)] == [
        "both", "percy", "ron", "fred", "noise"]


def test_pruning_in_the_program_uses_all_interpretations(use_lm):
    use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON, PERCY})))
    encoder = fake_encoder({
        RON: [1, 0, 0], PERCY: [0, 1, 0],
        PASSAGES["ron"].text: [1, 0, 0], PASSAGES["percy"].text: [0, 1, 0],
        PASSAGES["both"].text: [1, 1, 0],
    })
    out = _diva(encoder=encoder, top_k=1)(question=Q)
    assert [p["id"] for p in out.passages] == ["both"]
    assert out.passages[0]["score"] == pytest.approx(np.sqrt(0.5))


def test_union_dedupes_passage_ids(use_lm):
    use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON})))
    encoder = fake_encoder({})
    out = _diva(encoder=encoder, top_k=10)(question=Q)
    ids = [p["id"] for p in out.passages]
    assert sorted(ids) == ["both", "percy", "ron"]  # "both" was retrieved twice
    assert out.pool_size == 3
    # the encoder scored each unique passage once
    passage_batches = [b for b in encoder.calls if any("Title" in t for t in b)]
    assert len(passage_batches) == 1 and len(passage_batches[0]) == 3


def test_candidate_pool_mode_reranks_the_question_pool(use_lm):
    use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON, PERCY})))
    retriever = recording_retriever({Q: ["noise", "fred", "ron", "percy", "both"]})
    encoder = fake_encoder({
        RON: [1, 0, 0], PERCY: [0, 1, 0],
        PASSAGES["ron"].text: [1, 0, 0], PASSAGES["percy"].text: [0, 1, 0],
        PASSAGES["both"].text: [1, 1, 0], PASSAGES["fred"].text: [0, 0, 1],
        PASSAGES["noise"].text: [0, 0, 1],
    })
    out = Diva(retriever, candidates=5, k_per_query=1, top_k=5, encoder=encoder)(question=Q)
    assert retriever.searches == [(Q, 5)]  # one first-stage search for the question (C_i)
    assert sorted(p["id"] for p in out.passages) == ["percy", "ron"]  # each reading's top-1
    assert out.pool_size == 2


def test_no_passages_is_useless_without_verification_calls(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON})))
    out = _diva(retriever=recording_retriever({}))(question=Q)
    assert out.verdict == "Useless" and out.path == "closed_book"
    assert lm.engine.count("VerifyRetrieval") == 0
    assert any("no passages" in e for e in out.trace["events"])


# ---- typing and pseudo-interpretations ------------------------------------------------------


def test_type_none_still_rewrites_by_default(use_lm):
    """Issue 12 item 1: every ASQA question is ambiguous; a None typing must not switch
    diversification off (the old code made no rewrite call and searched the question)."""
    handlers = _handlers([RON, PERCY], supported={RON, PERCY}, kind="None")
    lm = use_lm(scripted_lm(handlers))
    retriever = _retriever()
    out = _diva(retriever=retriever)(question=Q)
    assert out.ambiguity_type == "None"
    assert lm.engine.count("PseudoInterpretations") == 1
    (rewrite,) = [inp for sig, inp in lm.engine.calls if sig == "PseudoInterpretations"]
    assert rewrite["ambiguity_type"] == "None"
    assert out.pseudo_interpretations == [RON, PERCY]
    assert [q for q, _ in retriever.searches] == [RON, PERCY]


def test_typing_prompt_presumes_ambiguity():
    from ambiqa.signatures.ambiguity import TypeAmbiguity

    text = " ".join(TypeAmbiguity.instructions.split())
    assert text.startswith("This question is ambiguous")
    assert "what makes it ambiguous" in text


def test_skip_unambiguous_option_gives_a_single_interpretation(use_lm):
    question = "What is the capital of France?"
    handlers = _handlers([], supported={question}, kind="None")
    handlers["ClarifyFromPassages"] = {"pairs": [
        {"question": question, "answer": "Paris", "passage": 1}]}
    lm = use_lm(scripted_lm(handlers))
    retriever = recording_retriever({question: ["noise"]})
    out = _diva(retriever=retriever, skip_unambiguous=True)(question=question)
    assert out.ambiguity_type == "None"
    assert out.pseudo_interpretations == [question]
    assert lm.engine.count("PseudoInterpretations") == 0
    assert retriever.searches == [(question, 5)]
    assert lm.engine.count("VerifyRetrieval") == 1
    assert out.verdict == "Useful" and out.path == "rag"
    assert out.interpretations == [{"question": question, "answer": "Paris",
                                    "passages": ["noise"]}]


def test_unparseable_typing_still_rewrites(use_lm):
    handlers = _handlers([RON, PERCY], supported={RON})
    handlers["TypeAmbiguity"] = "I think it is ambiguous, maybe."
    lm = use_lm(scripted_lm(handlers))
    out = _diva()(question=Q)
    assert out.ambiguity_type is None and out.reason == ""
    assert lm.engine.count("PseudoInterpretations") == 1
    assert out.pseudo_interpretations == [RON, PERCY]
    assert any(e.startswith("type_ambiguity") for e in out.trace["events"])
    assert out.verdict == "PartialUseful" and out.answer


def test_unknown_type_label_degrades_and_still_rewrites(use_lm):
    handlers = _handlers([RON], supported={Q}, kind="[AmbObj]")
    lm = use_lm(scripted_lm(handlers))
    out = _diva()(question=Q)
    assert out.pseudo_interpretations == [RON]
    assert lm.engine.count("PseudoInterpretations") == 1
    assert any("type_ambiguity" in e for e in out.trace["events"])


def test_unparseable_or_empty_interpretations_degrade(use_lm):
    for reply in ("no fields here", {"interpretations": ["  ", ""]}):
        handlers = _handlers([], supported={Q})
        handlers["PseudoInterpretations"] = reply
        use_lm(scripted_lm(handlers))
        out = _diva()(question=Q)
        assert out.ambiguity_type == "AmbObj"
        assert out.pseudo_interpretations == [Q]
        assert any("pseudo_interpretations" in e for e in out.trace["events"])


# ---- verification: abstentions, format, field order -------------------------------------------


def test_all_verifications_unparseable_take_the_rag_path(use_lm):
    """Issue 12 item 2: no parsed vote is no evidence against the passages (old: Useless and
    closed-book)."""
    handlers = _handlers([RON, PERCY], supported=set())
    handlers["VerifyRetrieval"] = "cannot tell"
    lm = use_lm(scripted_lm(handlers))
    out = _diva()(question=Q)
    assert out.verdict == "Unverified" and out.path == "rag"
    assert [v["supported"] for v in out.votes] == [None, None]
    assert out.abstained == 2
    assert lm.engine.count("ClarifyFromPassages") == 1
    assert lm.engine.count("ClosedBookLongAnswer") == 0
    assert any("every vote abstained" in e for e in out.trace["events"])


def test_unparsed_votes_abstain_and_the_verdict_counts_parsed_votes(use_lm):
    handlers = _handlers([RON, PERCY, FRED], supported=set())
    handlers["VerifyRetrieval"] = lambda inp: (
        {"evidence": "[1] Rupert Grint played Ron Weasley.", "verdict": "Yes."}
        if _value(inp, "interpretation") == RON else {"evidence": "?", "verdict": "maybe"})
    lm = use_lm(scripted_lm(handlers))
    out = _diva()(question=Q)
    # old: the two unreadable votes were "no" -> PartialUseful; now they abstain
    assert [v["supported"] for v in out.votes] == [True, None, None]
    assert out.verdict == "Useful" and out.path == "rag" and out.abstained == 2
    assert out.votes[0]["evidence"] == "[1] Rupert Grint played Ron Weasley."
    assert sum("abstained" in e for e in out.trace["events"]) == 2
    assert lm.engine.count("WriteLongAnswer") == 1


def test_abstentions_do_not_hide_a_useless_verdict(use_lm):
    handlers = _handlers([RON, PERCY], supported=set())
    handlers["VerifyRetrieval"] = lambda inp: (
        {"evidence": "none", "verdict": "No"} if _value(inp, "interpretation") == RON
        else "garbage")
    use_lm(scripted_lm(handlers))
    out = _diva()(question=Q)
    assert [v["supported"] for v in out.votes] == [False, None]
    assert out.verdict == "Useless" and out.path == "closed_book"


@pytest.mark.parametrize("text,expected", [
    ("yes", True), ("Yes.", True), ("**YES**", True), ("yes, passage 2", True), ("True", True),
    ("no", False), ("No.", False), ("false", False), ("[no]", False),
    ("", None), ("maybe", None), ("The passages say yes", None), (None, None)])
def test_parse_verdict(text, expected):
    from ambiqa.signatures.verification import parse_verdict

    assert parse_verdict(text) is expected


def test_verifier_reasons_before_its_verdict_and_sees_passages_first():
    """Issue 12 item 3 (evidence before the verdict, a one-word str verdict instead of a bool)
    and issue 13 item 2 (the passage block shared by a question's votes leads the prompt)."""
    from ambiqa.signatures.verification import VerifyRetrieval

    assert list(VerifyRetrieval.input_fields) == ["passages", "interpretation"]
    assert list(VerifyRetrieval.output_fields) == ["evidence", "verdict"]
    assert VerifyRetrieval.output_fields["verdict"].annotation is str


def test_brief_verifier_writes_the_answers_words_and_votes_like_the_sentence_one(use_lm):
    """``verify_evidence="brief"`` (issue 45): the same votes, paths and prompt order through
    VerifyRetrievalBrief, whose evidence is the answer's few words and whose cap is lower; the
    default still sends VerifyRetrieval."""
    from ambiqa.signatures.verification import VerifyRetrieval, VerifyRetrievalBrief

    handlers = _handlers([RON, PERCY, FRED], supported={PERCY})
    handlers["VerifyRetrievalBrief"] = lambda inp: {
        "evidence": "[2] Chris Rankin" if _value(inp, "interpretation") == PERCY else "none",
        "verdict": "yes" if _value(inp, "interpretation") == PERCY else "no"}
    lm = use_lm(scripted_lm(handlers))
    brief = _diva(verify_evidence="brief")
    out = brief(question=Q)
    assert lm.engine.count("VerifyRetrievalBrief") == 3 and lm.engine.count("VerifyRetrieval") == 0
    assert out.verdict == "PartialUseful" and out.path == "rag"
    assert [v["evidence"] for v in out.votes] == ["none", "[2] Chris Rankin", "none"]
    assert list(VerifyRetrievalBrief.input_fields) == list(VerifyRetrieval.input_fields)
    assert list(VerifyRetrievalBrief.output_fields) == list(VerifyRetrieval.output_fields)
    assert VerifyRetrievalBrief.output_cap_tokens < VerifyRetrieval.output_cap_tokens
    assert "few words" in VerifyRetrievalBrief.instructions
    assert brief.config()["verify_evidence"] == "brief"
    assert _diva().verify.signature.__name__ == "VerifyRetrieval"
    with pytest.raises(ConfigError, match="verify_evidence must be one of sentence, brief"):
        _diva(verify_evidence="quote")


def test_answer_words_adds_one_sentence_to_the_writers_prompt_and_keeps_its_name(use_lm):
    """``answer_words=N`` (issue 45): the writer's prompt is the default's plus "under N
    words"; the call is still ``WriteLongAnswer`` (traces, demo plans, artifacts) with the same
    fields and cap; the default prompt carries no such sentence."""
    from ambiqa.signatures.answering import WriteLongAnswer

    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON, PERCY})))
    out = _diva(answer_words=80)(question=Q)
    assert out.answer == "Several actors played Weasley brothers."
    assert lm.engine.count("WriteLongAnswer") == 1
    (system,) = [h["messages"][0]["content"] for h in lm.history
                 if "`long_answer`" in h["messages"][0]["content"]]
    assert "Keep the whole answer under 80 words" in system  # what the LM is sent
    sig = _diva(answer_words=80).long_answer.write.signature
    assert sig.__name__ == "WriteLongAnswer" and issubclass(sig, WriteLongAnswer)
    assert sig.instructions.startswith(WriteLongAnswer.instructions)
    assert sig.instructions.endswith("Keep the whole answer under 80 words: one short "
                                     "sentence per interpretation.")
    assert list(sig.fields) == list(WriteLongAnswer.fields)
    assert sig.output_cap_tokens == WriteLongAnswer.output_cap_tokens
    assert _diva().long_answer.write.signature is WriteLongAnswer
    assert "words" not in WriteLongAnswer.instructions
    for bad in (0, 5, "80"):
        with pytest.raises(ConfigError, match="answer_words"):
            _diva(answer_words=bad)


def test_verification_prompt_puts_the_shared_passages_before_the_interpretation(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON})))
    _diva()(question=Q)
    for sig, inp in lm.engine.calls:
        if sig == "VerifyRetrieval":
            assert list(inp)[:2] == ["passages", "interpretation"]


def test_verification_reads_the_pruned_set_not_the_union(use_lm):
    """Eq. 7 verifies P_i (after eq. 5), not the union of eq. 4."""
    encoder = fake_encoder({
        RON: [1, 0, 0], PERCY: [0, 1, 0],
        PASSAGES["ron"].text: [1, 0, 0], PASSAGES["percy"].text: [0, 1, 0],
        PASSAGES["both"].text: [1, 1, 0],
    })
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON, PERCY})))
    out = _diva(encoder=encoder, top_k=1)(question=Q)
    assert out.pool_size == 3
    verify_inputs = [inp for sig, inp in lm.engine.calls if sig == "VerifyRetrieval"]
    assert len(verify_inputs) == 2
    for inp in verify_inputs:
        assert PASSAGES["both"].text in inp["passages"]
        assert PASSAGES["ron"].text not in inp["passages"]
        assert PASSAGES["percy"].text not in inp["passages"]


def test_long_answer_receives_the_clarified_pairs(use_lm):
    """Eq. 2 writes the answer from eq. 1's DQ/DA pairs and the kept passages."""
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON, PERCY})))
    out = _diva()(question=Q)
    (write,) = [inp for sig, inp in lm.engine.calls if sig == "WriteLongAnswer"]
    assert f"{RON} -> Rupert Grint" in write["interpretations"]
    assert f"{PERCY} -> Chris Rankin" in write["interpretations"]
    for p in out.passages:
        assert p["text"] in write["passages"]


# ---- decoding -------------------------------------------------------------------------------


def test_decoding_defaults_are_the_papers_and_reach_every_call(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON})))
    prog = _diva()
    assert (prog.temperature, prog.top_p, prog.max_tokens) == (0.3, 1.0, 300)
    prog(question=Q)
    assert len(lm.history) == 6
    for entry in lm.history:
        assert entry["kwargs"]["temperature"] == 0.3
        assert entry["kwargs"]["max_tokens"] == 300
        assert "top_p" not in entry["kwargs"]  # 1.0 filters nothing; not sent


def test_decoding_is_configurable(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported=set())))
    _diva(temperature=0, top_p=0.9, max_tokens=64)(question=Q)
    assert lm.history and all(
        e["kwargs"]["temperature"] == 0.0 and e["kwargs"]["top_p"] == 0.9
        and e["kwargs"]["max_tokens"] == 64 for e in lm.history)
    for bad in ({"temperature": -1}, {"top_p": 0}, {"top_p": 1.5}, {"max_tokens": 0},
                {"temperature": "hot"}):
        with pytest.raises(ConfigError):
            _diva(**bad)


def test_interpretations_are_cleaned_deduplicated_and_capped(use_lm):
    readings = ["1: " + RON, "2. " + PERCY, "3) " + RON.lower(), "", FRED]
    use_lm(scripted_lm(_handlers(readings, supported={RON})))
    out = _diva(max_interpretations=2)(question=Q)
    assert out.pseudo_interpretations == [RON, PERCY]
    assert clean_interpretations("- A?\n- B?\n", 5) == ["A?", "B?"]


def test_prediction_is_json_serializable(use_lm):
    import json

    use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON})))
    out = _diva()(question=Q)
    json.dumps(dict(out.items()))


# ---- configuration ---------------------------------------------------------------------------


def test_config_and_bad_settings():
    prog = build_program("diva", retriever=_retriever(), k_per_query=4, top_k=3)
    assert prog.config() == {"k_per_query": 4, "top_k": 3, "candidates": 0,
                             "max_interpretations": 8, "skip_unambiguous": False,
                             "temperature": 0.3, "top_p": 1.0, "max_tokens": 300,
                             "trim_sentences": None, "verify_evidence": "sentence",
                             "answer_words": None}
    assert Diva().config()["k_per_query"] == 5 and Diva().config()["top_k"] == 5
    for bad in ({"top_k": 0}, {"k_per_query": "5"}, {"candidates": -1},
                {"max_interpretations": 0}, {"top_k": True}):
        with pytest.raises(ConfigError):
            Diva(_retriever(), **bad)
    with pytest.raises(ConfigError):
        build_program("diva", nonsense=1)


def test_diva_needs_a_retriever(use_lm):
    use_lm(scripted_lm(_handlers([RON], supported={RON})))
    with pytest.raises(ConfigError, match="needs a retriever"):
        Diva(encoder=fake_encoder({}))(question=Q)


def test_deepcopy_shares_the_encoder():
    import copy

    from ambiqa.types import SharedResource

    class SharedFake(KeywordEncoder, SharedResource):
        pass

    enc = SharedFake({}, fallback=[1.0, 1.0, 1.0])
    prog = Diva(_retriever(), encoder=enc)
    assert copy.deepcopy(prog).encoder is enc
    assert prog.deepcopy().encoder is enc  # what teleprompters call
    assert len(prog.named_predictors()) == 6


# ---- query refinement (closed-book) ---------------------------------------------------------


def test_query_refinement_answers_closed_book_covering_readings(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported=set())))
    prog = build_program("query_refinement")
    assert isinstance(prog, QueryRefinementClosedBook) and not prog.needs_retriever
    out = prog(question=Q)
    assert out.answer == "Several actors played Weasley brothers."
    assert out.pseudo_interpretations == [RON, PERCY]
    assert out.interpretations == [] and out.passages == []
    assert out.trace["retriever_calls"] == 0
    assert out.trace["calls_by_module"] == {"TypeAmbiguity": 1, "PseudoInterpretations": 1,
                                            "WriteLongAnswer": 1}
    (inputs,) = [inp for sig, inp in lm.engine.calls if sig == "WriteLongAnswer"]
    # readings without answers are listed as questions, not as "question -> " (issue 12.16)
    assert inputs["interpretations"].splitlines()[:2] == [f"- {RON}", f"- {PERCY}"]
    assert "->" not in inputs["interpretations"]
    assert inputs["passages"].startswith("(no passages)")


def test_query_refinement_degrades_to_the_question(use_lm):
    handlers = _handlers([RON], supported=set())
    handlers["TypeAmbiguity"] = "garbage"
    handlers["PseudoInterpretations"] = "garbage too"
    use_lm(scripted_lm(handlers))
    out = QueryRefinementClosedBook()(question=Q)
    assert out.pseudo_interpretations == [Q]
    assert out.answer
    assert any("type_ambiguity" in e for e in out.trace["events"])
