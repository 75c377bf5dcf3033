"""VerDICt control flow with the scripted LM, a recording retriever and hand-made vectors."""

from __future__ import annotations

import numpy as np
import pytest

from ambiqa.errors import ConfigError
from ambiqa.programs import verdict as verdict_module
from ambiqa.programs.registry import build_program
from ambiqa.programs.verdict import (
    VerDICt,
    consolidate,
    embedding_text,
    medoid,
    merge_close_clusters,
    rule_violations,
)
from ambiqa.testing import FixedRetriever, KeywordEncoder, scripted_lm
from ambiqa.types import Passage

QUESTION = "Who played the Weasley brother in Harry Potter?"


def _passage(pid: str, text: str) -> Passage:
    return Passage(pid, f"Title {pid}", text)


def _pid(inputs: dict[str, str]) -> str:
    """The passage id from the rendered passage field ("[1] Title p3: ...")."""
    return inputs["passage"].split("Title ", 1)[1].split(":", 1)[0]


def interpret_by_passage(table: dict[str, object]):
    """InterpretFromPassage handler: per passage id, a (question, answer) pair, None to
    abstain, or a raw string (unparseable reply)."""
    def handler(inputs):
        entry = table[_pid(inputs)]
        if entry is None:
            return {"abstain": False if _pid(inputs).endswith("n") else True,
                    "interpretation": "none", "answer": "none"}
        if isinstance(entry, str):
            return entry
        q, a = entry
        return {"abstain": False, "interpretation": q, "answer": a}
    return handler


# Two tight clusters (Fred, Percy) and one outlier (Ron), as hand-made unit-ish vectors.
FRED = {"Fred a": [1.0, 0.05, 0.0, 0.0], "Fred b": [1.0, 0.0, 0.05, 0.0],
        "Fred c": [1.0, 0.02, 0.02, 0.0]}
PERCY = {"Percy a": [0.0, 1.0, 0.05, 0.0], "Percy b": [0.05, 1.0, 0.0, 0.0],
         "Percy c": [0.0, 1.0, 0.0, 0.03]}
RON = {"Ron": [0.0, 0.0, 0.0, 1.0]}
VECTORS = {**FRED, **PERCY, **RON}
PAIRS = {  # passage id -> (interpretation, answer); the interpretation carries the vector key
    "p1": ("Who played Fred a?", "James Phelps"),
    "p2": ("Who played Fred b?", "James Phelps"),
    "p3": ("Who played Fred c?", "James Phelps"),
    "p4": ("Who played Percy a?", "Chris Rankin"),
    "p5": ("Who played Percy b?", "Chris Rankin"),
    "p6": ("Who played Percy c?", "Chris Rankin"),
    "p7": ("Who played Ron?", "Rupert Grint"),
}
PASSAGES = [_passage(pid, f"text of {pid}") for pid in PAIRS] + [
    _passage("p8", "unrelated"), _passage("p9n", "also unrelated")]


def _lm(pairs=None, **extra):
    table = dict(PAIRS if pairs is None else pairs)
    table.setdefault("p8", None)
    table.setdefault("p9n", None)
    handlers = {
        "RelaxQuery": {"relaxed_query": "Weasley actors Harry Potter"},
        "InterpretFromPassage": interpret_by_passage(table),
        "WriteLongAnswer": {"long_answer": "Several Weasleys were played by different actors."},
        "ClosedBookLongAnswer": {"long_answer": "From memory: Rupert Grint played Ron."},
    }
    handlers.update(extra)
    return scripted_lm(handlers)


def test_one_retrieval_and_one_interpret_call_per_passage(use_lm):
    lm = use_lm(_lm())
    retriever = FixedRetriever(PASSAGES)
    prog = VerDICt(retriever, n_passages=9, rerank_depth=0, encoder=KeywordEncoder(VECTORS))
    out = prog(question=QUESTION)

    assert retriever.calls == [("Weasley actors Harry Potter", 9)]  # relaxed query, once
    assert lm.engine.count("RelaxQuery") == 1
    assert lm.engine.count("InterpretFromPassage") == 9
    seen = sorted(_pid(inp) for key, inp in lm.engine.calls if key == "InterpretFromPassage")
    assert seen == sorted(p.id for p in PASSAGES)  # each passage exactly once, alone
    assert all(inp["question"] == QUESTION for key, inp in lm.engine.calls
               if key == "InterpretFromPassage")
    assert out.trace["retriever_calls"] == 1
    assert out.trace["calls_by_module"] == {"RelaxQuery": 1, "InterpretFromPassage": 9,
                                            "WriteLongAnswer": 1}
    assert out.relaxed_query == "Weasley actors Harry Potter"
    assert len(out.passages) == 9 and out.grounded is True


def test_abstains_are_excluded_and_counted(use_lm):
    use_lm(_lm())
    encoder = KeywordEncoder(VECTORS)
    out = VerDICt(FixedRetriever(PASSAGES), n_passages=9, rerank_depth=0,
                  encoder=encoder)(question=QUESTION)
    # p8 abstains explicitly; p9n says abstain=False but gives no interpretation ("none").
    assert out.n_abstained == 2 and out.n_dropped == 0
    assert [c["passage"] for c in out.candidates] == [f"p{i}" for i in range(1, 8)]
    assert len(encoder.calls) == 1 and len(encoder.calls[0]) == 7


def test_embeds_interpretation_joined_with_answer(use_lm):
    use_lm(_lm())
    encoder = KeywordEncoder(VECTORS)
    VerDICt(FixedRetriever(PASSAGES), n_passages=9, rerank_depth=0,
            encoder=encoder)(question=QUESTION)
    assert encoder.calls[0][0] == embedding_text("Who played Fred a?", "James Phelps")
    assert encoder.calls[0][0] == "Who played Fred a? James Phelps"


def test_medoid_is_the_most_central_member():
    vectors = np.array([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]])
    assert medoid(vectors, [0, 1, 2, 3]) in (1, 2)  # the two central ones tie
    assert medoid(vectors, [0, 1, 2, 3]) == 1  # ties go to the better-ranked passage
    assert medoid(vectors, [0, 1, 2]) == 1
    assert medoid(vectors, [2, 3]) == 2


def test_program_keeps_medoids_and_cites_their_passages(use_lm):
    # Fred's middle candidate (p3 here) is the medoid: p1 and p2 lean in different directions.
    fred = {"Fred a": [1.0, 0.3, 0.0, 0.0], "Fred b": [1.0, 0.0, 0.3, 0.0],
            "Fred c": [1.0, 0.15, 0.15, 0.0]}
    use_lm(_lm())
    retriever = FixedRetriever(PASSAGES)
    out = VerDICt(retriever, n_passages=9, rerank_depth=0,
                  encoder=KeywordEncoder({**fred, **PERCY, **RON}))(question=QUESTION)
    got = {(i["answer"], tuple(i["passages"])) for i in out.interpretations}
    assert ("James Phelps", ("p3",)) in got
    assert {a for a, _ in got} == {"James Phelps", "Chris Rankin"}  # Ron is noise: dropped
    for interp in out.interpretations:
        assert retriever.get(interp["passages"][0]) is not None
    medoids = [c for c in out.candidates if c["medoid"]]
    assert len(medoids) == 2
    fred_labels = {c["cluster"] for c in out.candidates if c["answer"] == "James Phelps"}
    assert len(fred_labels) == 1 and fred_labels != {-1}
    assert [c["cluster"] for c in out.candidates if c["answer"] == "Rupert Grint"] == [-1]


def test_long_answer_reads_only_the_cited_passages(use_lm):
    lm = use_lm(_lm())
    out = VerDICt(FixedRetriever(PASSAGES), n_passages=9, rerank_depth=0,
                  encoder=KeywordEncoder(VECTORS))(question=QUESTION)
    assert out.answer == "Several Weasleys were played by different actors."
    (inputs,) = [inp for key, inp in lm.engine.calls if key == "WriteLongAnswer"]
    cited = {pid for i in out.interpretations for pid in i["passages"]}
    for p in PASSAGES:
        assert (f"text of {p.id}" in inputs["passages"]) == (p.id in cited)
    assert "James Phelps" in inputs["interpretations"]


@pytest.mark.parametrize(("mode", "answers"), [
    ("recall", ["James Phelps", "Chris Rankin", "Rupert Grint"]),  # the outlier survives
    ("balanced", ["James Phelps", "Chris Rankin"]),  # the outlier is dropped
])
def test_conservativeness_changes_noise_handling(use_lm, mode, answers):
    use_lm(_lm())
    prog = VerDICt(FixedRetriever(PASSAGES), n_passages=9, rerank_depth=0,
                   conservativeness=mode,
                   encoder=KeywordEncoder(VECTORS))
    assert prog.config()["conservativeness"] == mode
    out = prog(question=QUESTION)
    assert [i["answer"] for i in out.interpretations] == answers
    ron = [c for c in out.candidates if c["answer"] == "Rupert Grint"]
    assert ron[0]["cluster"] == -1 and ron[0]["medoid"] is (mode == "recall")


def test_close_clusters_merge_in_every_mode():
    close_a = [[1.0, 0.2, 0.0, 0.0], [1.0, 0.21, 0.01, 0.0], [1.0, 0.19, 0.0, 0.01]]
    close_b = [[1.0, -0.2, 0.0, 0.0], [1.0, -0.21, 0.01, 0.0], [1.0, -0.19, 0.0, 0.01]]
    outlier = [[0.0, 0.0, 0.0, 1.0]]
    vectors = np.array(close_a + close_b + outlier)
    # cos(a, b) ~ 0.92: one reading in every mode (issue 12 item 11)
    for mode in ("recall", "balanced", "precision"):
        labels, chosen = consolidate(vectors, 2, mode)
        assert len(set(labels[:6])) == 1 and labels[-1] == -1
        assert len(chosen) == (2 if mode == "recall" else 1)
        assert chosen[-1] == (6 if mode == "recall" else chosen[0])
    # far-apart clusters are never merged
    groups = merge_close_clusters(np.eye(3), [[0], [1], [2]])
    assert sorted(groups) == [[0], [1], [2]]


def test_no_cluster_keeps_the_overall_medoid_unless_recall():
    vectors = np.eye(3)  # three unrelated candidates
    assert consolidate(vectors, 2, "recall")[1] == [0, 1, 2]
    assert consolidate(vectors, 2, "balanced")[1] == [0]
    assert consolidate(vectors, 3, "precision")[1] == [0]
    assert consolidate(np.eye(2), 3, "balanced") == ([-1, -1], [0])  # fewer than a cluster


def test_unparseable_reply_drops_only_that_passage(use_lm):
    pairs = dict(PAIRS)
    pairs["p2"] = "garbled output with no fields at all"
    use_lm(_lm(pairs))
    out = VerDICt(FixedRetriever(PASSAGES), n_passages=9, rerank_depth=0,
                  encoder=KeywordEncoder(VECTORS))(question=QUESTION)
    assert out.n_dropped == 1 and out.n_abstained == 2
    assert [c["passage"] for c in out.candidates] == ["p1", "p3", "p4", "p5", "p6", "p7"]
    assert any("verdict.interpret[p2]" in e for e in out.trace["events"])
    assert {i["answer"] for i in out.interpretations} == {"James Phelps", "Chris Rankin"}


def test_all_abstain_falls_back_to_closed_book_ungrounded(use_lm):
    lm = use_lm(_lm({pid: None for pid in PAIRS}))
    encoder = KeywordEncoder(VECTORS)
    out = VerDICt(FixedRetriever(PASSAGES), n_passages=9, rerank_depth=0, encoder=encoder)(
        question=QUESTION)
    assert out.interpretations == [] and out.candidates == []
    assert out.grounded is False and out.n_abstained == 9
    assert out.answer == "From memory: Rupert Grint played Ron."
    assert lm.engine.count("ClosedBookLongAnswer") == 1
    assert lm.engine.count("WriteLongAnswer") == 0
    assert encoder.calls == []
    assert any("closed-book" in e for e in out.trace["events"])


def test_single_candidate_skips_clustering(use_lm):
    pairs = {pid: None for pid in PAIRS}
    pairs["p4"] = ("Who played Percy a?", "Chris Rankin")
    use_lm(_lm(pairs))
    encoder = KeywordEncoder(VECTORS)
    out = VerDICt(FixedRetriever(PASSAGES), n_passages=9, rerank_depth=0, encoder=encoder)(
        question=QUESTION)
    assert encoder.calls == []
    assert out.interpretations == [{"question": "Who played Percy a?", "answer": "Chris Rankin",
                                    "passages": ["p4"]}]
    assert out.candidates[0]["cluster"] == 0 and out.candidates[0]["medoid"] is True


def test_failed_relaxation_searches_the_question(use_lm):
    use_lm(_lm(RelaxQuery="no fields"))
    retriever = FixedRetriever(PASSAGES)
    out = VerDICt(retriever, n_passages=3, rerank_depth=0,
                  encoder=KeywordEncoder(VECTORS))(question=QUESTION)
    assert retriever.calls == [(QUESTION, 3)]
    assert out.relaxed_query == QUESTION
    assert any("verdict.relax" in e for e in out.trace["events"])


def test_short_mode_writes_no_long_answer(use_lm):
    lm = use_lm(_lm())
    out = VerDICt(FixedRetriever(PASSAGES), n_passages=9, rerank_depth=0,
                  long_answer=False, encoder=KeywordEncoder(VECTORS))(question=QUESTION)
    assert lm.engine.count("WriteLongAnswer") == 0
    assert "James Phelps" in out.answer and "Chris Rankin" in out.answer


def test_short_mode_still_answers_closed_book_when_no_passage_answers(use_lm):
    """Declared: ``long_answer=False`` writes the pairs out without a call, but with no pair
    at all there is nothing to write out, so the closed-book answer is still asked for."""
    lm = use_lm(_lm({pid: None for pid in PAIRS}))
    out = VerDICt(FixedRetriever(PASSAGES), n_passages=9, rerank_depth=0, long_answer=False,
                  encoder=KeywordEncoder(VECTORS))(question=QUESTION)
    assert out.grounded is False and out.answer == "From memory: Rupert Grint played Ron."
    assert lm.engine.count("ClosedBookLongAnswer") == 1


def test_duplicate_pairs_are_kept_once(use_lm):
    pairs = {pid: ("Who played Ron?", "Rupert Grint") for pid in PAIRS}
    use_lm(_lm(pairs))
    out = VerDICt(FixedRetriever(PASSAGES), n_passages=9, rerank_depth=0,
                  conservativeness="recall", encoder=KeywordEncoder(VECTORS))(question=QUESTION)
    assert [i["answer"] for i in out.interpretations] == ["Rupert Grint"]


def test_config_and_registry():
    prog = build_program("verdict", retriever=FixedRetriever(PASSAGES), n_passages=6)
    assert isinstance(prog, VerDICt)
    assert prog.config() == {"n_passages": 6, "min_cluster_size": 2,
                             "conservativeness": "balanced", "long_answer": True,
                             "rerank_depth": 100, "candidate_check": False,
                             "trim_sentences": None}
    assert VerDICt().config()["n_passages"] == 20
    # the LM steps an optimizer can tune, by name
    assert [n for n, _ in prog.named_predictors()] == [
        "relax", "interpret", "write_long_answer.write", "closed_book.answer"]


@pytest.mark.parametrize("bad", [{"min_cluster_size": 1}, {"min_cluster_size": 2.5},
                                 {"conservativeness": "aggressive"}, {"n_passages": 0},
                                 {"n_passages": True}, {"rerank_depth": -1},
                                 {"reranker": object()}])
def test_bad_settings_are_clear_errors(bad):
    with pytest.raises(ConfigError):
        VerDICt(**bad)


def test_missing_retriever_is_a_clear_error(use_lm):
    use_lm(_lm())
    with pytest.raises(ConfigError, match="needs a retriever"):
        VerDICt(encoder=KeywordEncoder(VECTORS))(question=QUESTION)


# ---- one reading, one interpretation (issue 12 item 11) --------------------------------------


PARAPHRASES = {  # six wordings of one reading, in two slightly different sub-blobs
    "Fred one": [1.0, 0.15, 0.0, 0.0], "Fred two": [1.0, 0.15, 0.01, 0.0],
    "Fred three": [1.0, 0.15, 0.02, 0.0], "Fred four": [1.0, -0.15, 0.0, 0.0],
    "Fred five": [1.0, -0.15, 0.01, 0.0], "Fred six": [1.0, -0.15, 0.02, 0.0]}


@pytest.mark.parametrize("mode", ["recall", "balanced", "precision"])
def test_a_blob_of_paraphrases_is_one_interpretation_in_every_mode(use_lm, mode):
    names = list(PARAPHRASES)
    pairs = {f"p{i}": (f"Who played {name} Weasley?", "James Phelps")
             for i, name in enumerate(names, start=1)}
    pairs["p7"] = None
    passages = [_passage(pid, f"text of {pid}") for pid in pairs] + [
        _passage("p8", "x"), _passage("p9n", "y")]
    use_lm(_lm(pairs))
    out = VerDICt(FixedRetriever(passages), n_passages=9, rerank_depth=0,
                  conservativeness=mode, encoder=KeywordEncoder(PARAPHRASES))(question=QUESTION)
    assert len(out.interpretations) == 1
    assert len({c["cluster"] for c in out.candidates}) == 1


def test_recall_mode_merges_a_noise_point_that_paraphrases_a_cluster():
    blob = [[1.0, 0.0, 0.0], [1.0, 0.01, 0.0], [1.0, 0.0, 0.01]]
    near = [[1.0, 0.3, 0.0]]  # cos ~0.96 to the blob, but too far for HDBSCAN's cluster
    far = [[0.0, 0.0, 1.0]]
    labels, chosen = consolidate(np.array(blob + near + far), 3, "recall")
    assert labels[3] == labels[0] and labels[4] == -1
    assert chosen == [0, 4] or chosen == [1, 4] or chosen == [2, 4]


# ---- second-stage re-ranking (issue 12 item 12) ----------------------------------------------


class ReverseReranker:
    """Re-ranks by reversing the candidates; records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], int]] = []

    def rerank(self, query, passages, k=None):
        self.calls.append((query, [p.id for p in passages], k))
        return list(reversed(passages))[:k]


def test_second_stage_reranks_the_deeper_pool_to_n_passages(use_lm):
    lm = use_lm(_lm())
    retriever = FixedRetriever(PASSAGES)
    reranker = ReverseReranker()
    out = VerDICt(retriever, n_passages=3, rerank_depth=9, reranker=reranker,
                  encoder=KeywordEncoder(VECTORS))(question=QUESTION)
    assert retriever.calls == [("Weasley actors Harry Potter", 9)]
    assert reranker.calls == [("Weasley actors Harry Potter", [p.id for p in PASSAGES], 3)]
    assert [p["id"] for p in out.passages] == ["p9n", "p8", "p7"]
    read = sorted(_pid(inp) for key, inp in lm.engine.calls if key == "InterpretFromPassage")
    assert read == ["p7", "p8", "p9n"]


def test_reranking_is_on_by_default_with_the_sentence_reranker():
    from ambiqa.retrieval.rerank import SentenceReranker

    prog = VerDICt(FixedRetriever(PASSAGES))
    assert prog.rerank_depth == 100 and prog.n_passages == 20
    assert isinstance(prog.reranker, SentenceReranker)


def test_interpret_prompt_carries_the_papers_rules():
    from ambiqa.signatures.disambiguation import InterpretFromPassage

    text = " ".join(InterpretFromPassage.instructions.split())
    assert "at most one reading per passage" in text
    assert "clearest time reference" in text
    assert list(InterpretFromPassage.input_fields) == ["question", "passage"]


PASSAGE_TEXT = "James Phelps played Fred Weasley in all eight Harry Potter films."


@pytest.mark.parametrize("interpretation, answer, broken", [
    ("Who played Fred Weasley in the films?", "James Phelps", []),
    ("who played Fred Weasley in the films", "James Phelps", []),  # a question, no "?"
    ("James Phelps played Fred Weasley.", "James Phelps", ["not a question"]),
    ("Fred Weasley", "James Phelps", ["not a question"]),
    ("Who played Fred?", "James Phelps played Fred Weasley in all eight Harry Potter films",
     ["answer too long"]),
    ("Who played Fred Weasley?", "the Weasley brother", ["answer restates the question"]),
    ("Who played Fred Weasley?", "none at all", ["answer not in passage"]),
    ("Who played Fred Weasley?", "Oliver Phelps", []),  # half its tokens in the passage
    ("Who played Fred Weasley?", "Oliver Gerald Smith", ["answer not in passage"]),
    ("Harry Potter", "Harry Potter", ["not a question", "answer restates the question"]),
])
def test_rule_violations_name_each_broken_rule(interpretation, answer, broken):
    assert rule_violations(QUESTION, interpretation, answer, PASSAGE_TEXT) == broken


def test_candidate_check_drops_rule_breakers_before_clustering(use_lm, monkeypatch):
    pairs = dict(PAIRS)
    pairs["p1"] = ("Fred a played by James Phelps", "James Phelps")  # not a question
    pairs["p4"] = ("Who played Percy a?", "The Weasley brother")  # echoes the question
    passages = [_passage(pid, f"text of {pid}: {PAIRS[pid][1]}") for pid in PAIRS] + \
        PASSAGES[-2:]

    def run():
        use_lm(_lm(pairs))
        encoder = KeywordEncoder(VECTORS)
        out = VerDICt(FixedRetriever(passages), n_passages=9, rerank_depth=0,
                      encoder=encoder, candidate_check=True)(question=QUESTION)
        return out, encoder

    # the rules chosen on train: only the echo is checked; a statement stays
    out, encoder = run()
    assert out.n_rejected == 1
    assert [(r["passage"], r["rejected"]) for r in out.rejected] == [
        ("p4", "answer restates the question")]
    assert [c["passage"] for c in out.candidates] == ["p1", "p2", "p3", "p5", "p6", "p7"]
    assert len(encoder.calls[0]) == 6  # the rejected one was never embedded
    assert any("dropped 1 of 7 candidates" in e for e in out.trace["events"])
    # with every rule checked, the statement goes too
    monkeypatch.setattr(verdict_module, "CHECKED_RULES", verdict_module.RULES)
    out, encoder = run()
    assert {(r["passage"], r["rejected"]) for r in out.rejected} == {
        ("p1", "not a question"), ("p4", "answer restates the question")}
    assert len(encoder.calls[0]) == 5
    assert {i["answer"] for i in out.interpretations} == {"James Phelps", "Chris Rankin"}


def test_candidate_check_is_off_by_default_and_all_rejected_goes_closed_book(use_lm):
    echo = {pid: (q.rstrip("?"), "Harry Potter") for pid, (q, _) in PAIRS.items()}
    use_lm(_lm(echo))
    out = VerDICt(FixedRetriever(PASSAGES), n_passages=9, rerank_depth=0,
                  encoder=KeywordEncoder(VECTORS))(question=QUESTION)
    assert out.n_rejected == 0 and len(out.candidates) == 7  # the paper's program keeps all
    use_lm(_lm(echo))
    out = VerDICt(FixedRetriever(PASSAGES), n_passages=9, rerank_depth=0,
                  encoder=KeywordEncoder(VECTORS), candidate_check=True)(question=QUESTION)
    assert out.n_rejected == 7 and out.candidates == [] and out.grounded is False
    assert out.answer == "From memory: Rupert Grint played Ron."
