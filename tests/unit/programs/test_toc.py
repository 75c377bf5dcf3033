"""Tree of Clarifications control flow with the scripted LM, a fake encoder and an in-memory
retriever: BFS limits, failed expansions, pruning, dedup, restore, call counts."""

from __future__ import annotations

import functools
import json
from collections import Counter

import numpy as np
import pytest

from ambiqa.errors import ConfigError
from ambiqa.programs.registry import build_program
from ambiqa.programs.toc import TreeOfClarifications
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import HashEncoder, alnum_words, scripted_lm
from ambiqa.types import Passage, SharedResource

AQ = "Who played Weasley in Harry Potter?"

PASSAGES = [
    Passage("fred", "Fred Weasley", "James Phelps played Fred Weasley in the Harry Potter films."),
    Passage("george", "George Weasley", "Oliver Phelps played George Weasley in Harry Potter."),
    Passage("percy", "Percy Weasley", "Chris Rankin played Percy Weasley in Harry Potter."),
    Passage("ron", "Ron Weasley", "Rupert Grint played Ron Weasley in the Harry Potter films."),
    Passage("paris", "Paris", "Paris is the capital of France."),
]


# Deterministic bag-of-words embeddings (crc32-hashed tokens), unit length.
FakeEncoder = functools.partial(HashEncoder, 64, tokenize=alnum_words, hash="crc32")


def make(**kw) -> TreeOfClarifications:
    kw.setdefault("max_workers", 1)
    kw.setdefault("n_retrieve", 5)
    kw.setdefault("k", 3)
    return TreeOfClarifications(InMemoryRetriever(PASSAGES), encoder=FakeEncoder(), **kw)


def pairs(*items: tuple[str, str]) -> dict:
    return {"pairs": [{"question": q, "answer": a, "passage": 1} for q, a in items]}


def branching(*tags: str):
    """Clarify handler: each question ``Q?`` gets one child ``Q <tag><n>?`` per tag, where n is
    the word count of Q (so every level's DQs are distinct and deterministic)."""

    def handler(inputs: dict[str, str]) -> dict:
        q = inputs["question"].rstrip("?")
        n = len(q.split())
        return pairs(*[(f"{q} {t}{n}?", f"answer {t}{n}") for t in tags])

    return handler


def value(inputs: dict[str, str], name: str) -> str:
    """An input field's text without the adapter's closing "Respond with ..." line (it follows
    the last input field)."""
    return inputs[name].split("\n\nRespond with")[0]


def valid_unless(word: str):
    """Self-verify handler: prune answers containing ``word`` (the paper's verifier sees the
    AQ, the passage and the answer, not the DQ)."""
    return lambda inputs: {"valid": word not in value(inputs, "answer")}


def clarified(lm) -> list[str]:
    """The questions the clarification step was asked about, in call order."""
    return [inp["question"] for key, inp in lm.engine.calls if key == "ClarifyFromPassages"]


LONG = {"long_answer": "Several Weasleys were played by different actors."}


def test_stops_at_max_nodes_without_overshooting(use_lm):
    lm = use_lm(scripted_lm({"ClarifyFromPassages": branching("x", "y", "z"),
                             "SelfVerify": {"valid": True}, "WriteLongAnswer": LONG}))
    out = make(max_nodes=5)(question=AQ)
    assert out.stop_reason == "max_nodes"
    assert len(out.interpretations) == 5 and len(out.tree) == 6  # root + 5
    # root gave 3, the first child gave 3 of which only 2 were wanted: never verified
    assert lm.engine.count("ClarifyFromPassages") == 2
    assert lm.engine.count("SelfVerify") == 5
    assert out.n_over_limit == 1 and out.discarded_expansions == 0
    assert out.answer == LONG["long_answer"]
    assert [n["depth"] for n in out.tree] == [0, 1, 1, 1, 2, 2]
    assert [n["parent"] for n in out.tree] == [None, 0, 0, 0, 1, 1]
    json.dumps(out.tree)  # JSON-serializable


def test_concurrent_siblings_build_the_same_tree(use_lm):
    handlers = {"ClarifyFromPassages": branching("x", "y", "z"),
                "SelfVerify": {"valid": True}, "WriteLongAnswer": LONG}
    use_lm(scripted_lm(handlers))
    serial = make(max_nodes=5)(question=AQ)
    lm = use_lm(scripted_lm(handlers))
    parallel = make(max_nodes=5, max_workers=4)(question=AQ)
    assert parallel.tree == serial.tree
    assert parallel.interpretations == serial.interpretations
    # the three depth-1 siblings were clarified together; two results came too late to count
    assert lm.engine.count("ClarifyFromPassages") == 4
    assert parallel.discarded_expansions == 2


def test_stops_at_max_depth(use_lm):
    lm = use_lm(scripted_lm({"ClarifyFromPassages": branching("x"),
                             "SelfVerify": {"valid": True}, "WriteLongAnswer": LONG}))
    out = make(max_depth=2, max_nodes=10)(question=AQ)
    assert out.stop_reason == "max_depth"
    assert max(n["depth"] for n in out.tree) == 2
    assert len(out.tree) == 3
    # the depth-2 node is never expanded
    assert clarified(lm) == [AQ, "Who played Weasley in Harry Potter x6?"]
    assert [n["expanded"] for n in out.tree] == [True, True, False]


def children_then(fn):
    """Root gets five children c1..c5; every other question is answered by ``fn(q)``."""

    def handler(inputs):
        q = inputs["question"]
        if q == AQ:
            return pairs(*[(f"Which Weasley c{i}?", f"actor {i}") for i in range(1, 6)])
        return fn(q)

    return handler


def echo(q: str) -> dict:
    """Clarifying a DQ gives the DQ back with its answer: a duplicate, so no new node."""
    i = q.split("c")[-1].rstrip("?")
    return pairs((q, f"actor {i}"))


def test_stops_after_three_failed_expansions_in_a_row(use_lm):
    lm = use_lm(scripted_lm({"ClarifyFromPassages": children_then(echo),
                             "SelfVerify": {"valid": True}, "WriteLongAnswer": LONG}))
    out = make(max_nodes=10)(question=AQ)
    assert out.stop_reason == "max_failed"
    assert clarified(lm) == [AQ, "Which Weasley c1?", "Which Weasley c2?", "Which Weasley c3?"]
    assert out.n_duplicates == 3
    assert len(out.interpretations) == 5


def test_a_success_resets_the_failed_count(use_lm):
    def fn(q):
        if q == "Which Weasley c2?":
            return pairs(("Which Weasley c2 in 2001?", "actor 2b"))
        return echo(q)

    lm = use_lm(scripted_lm({"ClarifyFromPassages": children_then(fn),
                             "SelfVerify": {"valid": True}, "WriteLongAnswer": LONG}))
    out = make(max_nodes=10)(question=AQ)
    assert out.stop_reason == "max_failed"
    # c1 fails, c2 succeeds, c3..c5 fail: the third failure in a row stops before the grandchild
    assert clarified(lm) == [AQ] + [f"Which Weasley c{i}?" for i in range(1, 6)]
    assert len(out.interpretations) == 6


def test_never_expands_a_pruned_node(use_lm):
    lm = use_lm(scripted_lm({"ClarifyFromPassages": branching("g", "bad", "h"),
                             "SelfVerify": valid_unless("bad"), "WriteLongAnswer": LONG}))
    out = make(max_nodes=6, max_depth=3)(question=AQ)
    pruned = [n for n in out.tree if n["pruned"]]
    assert pruned and all("bad" in n["question"] and not n["valid"] for n in pruned)
    assert all(not n["expanded"] for n in pruned)
    assert not any("bad" in q for q in clarified(lm))
    assert all("bad" not in i["question"] for i in out.interpretations)
    assert len(out.interpretations) == 6


def test_exactly_one_self_verify_per_node_with_its_evidence(use_lm):
    lm = use_lm(scripted_lm({"ClarifyFromPassages": branching("g", "bad", "h"),
                             "SelfVerify": valid_unless("bad"), "WriteLongAnswer": LONG}))
    out = make(max_nodes=6)(question=AQ)
    verified = [inp for key, inp in lm.engine.calls if key == "SelfVerify"]
    assert Counter(value(v, "answer") for v in verified) == Counter(
        n["answer"] for n in out.tree[1:])
    # the paper's verifier: the AQ, the answer-containing passage and the answer -- no DQ
    assert all(list(v)[:3] == ["question", "passage", "answer"] for v in verified)
    assert all("interpretation" not in v for v in verified)
    assert all(v["question"] == AQ for v in verified)
    # the verifier sees the node's answer-containing (here: cited) passage
    by_a = {value(v, "answer"): v for v in verified}
    for node in out.tree[1:]:
        (pid,) = node["passages"]
        text = next(p.text for p in PASSAGES if p.id == pid)
        assert text in by_a[node["answer"]]["passage"]


def test_strict_verification_is_an_option_that_also_sees_the_dq(use_lm):
    lm = use_lm(scripted_lm({"ClarifyFromPassages": branching("g", "bad", "h"),
                             "SelfVerifyStrict": lambda inp: {
                                 "valid": "bad" not in inp["interpretation"]},
                             "WriteLongAnswer": LONG}))
    out = make(max_nodes=6, verification="strict")(question=AQ)
    verified = [inp for key, inp in lm.engine.calls if key == "SelfVerifyStrict"]
    assert verified and lm.engine.count("SelfVerify") == 0
    assert all(list(v)[:4] == ["question", "passage", "interpretation", "answer"]
               for v in verified)
    assert all("bad" not in i["question"] for i in out.interpretations)
    assert make(verification="strict").config()["verification"] == "strict"


def test_evidence_verification_reads_a_word_after_a_quote_and_keeps_unreadable_nodes(use_lm):
    """verification="evidence": the paper's inputs (no DQ), a quoted sentence then yes/no;
    "no" prunes, an unreadable verdict abstains (the node is kept) and the trace says so."""

    def judge(inputs):
        answer = value(inputs, "answer")
        verdict = "No." if "bad" in answer else ("perhaps" if "h" in answer else "**Yes**")
        return {"evidence": "none", "verdict": verdict}

    lm = use_lm(scripted_lm({"ClarifyFromPassages": branching("g", "bad", "h"),
                             "SelfVerifyEvidence": judge, "WriteLongAnswer": LONG}))
    out = make(max_nodes=4, max_depth=1, min_nodes=0, verification="evidence")(question=AQ)
    verified = [inp for key, inp in lm.engine.calls if key == "SelfVerifyEvidence"]
    assert len(verified) == 3 and lm.engine.count("SelfVerify") == 0
    assert all(list(v)[:3] == ["question", "passage", "answer"] for v in verified)
    assert all("interpretation" not in v for v in verified)
    kept = {i["answer"] for i in out.interpretations}
    assert kept == {"answer g6", "answer h6"}  # "no" pruned; "perhaps" abstained and kept
    assert sum("verification abstained" in e for e in out.trace["events"]) == 1
    with pytest.raises(ConfigError, match="verification must be one of"):
        make(verification="lenient")


def test_verify_false_makes_no_self_verify_call(use_lm):
    lm = use_lm(scripted_lm({"ClarifyFromPassages": branching("g", "bad", "h"),
                             "WriteLongAnswer": LONG}))
    out = make(max_nodes=6, verify=False)(question=AQ)
    assert lm.engine.count("SelfVerify") == 0
    assert len(out.interpretations) == 6
    assert all(n["valid"] and not n["pruned"] for n in out.tree)


def test_verify_false_deduplicates_nothing_as_the_release(use_lm):
    """The "RAC+TS" ablation has no pruning, and deduplication is pruning (paper Table 3's
    "w/o Pruning" row; the release calls ``check_unique`` only under ``--verify``): every
    proposed pair becomes a node, repeats of earlier nodes included. (An exact repeat inside
    one reply is dropped by ``ClarifyStep`` for every program, so the reply below gives 2.)"""
    fred = "Who played Fred Weasley in the Harry Potter films?"
    lower = "who played fred weasley in the harry potter films"

    def clarify(inputs):
        if inputs["question"] == AQ:
            return pairs((fred, "James Phelps"), (fred, "James Phelps"), (lower, "J. Phelps"))
        return pairs((fred, "James Phelps"))

    lm = use_lm(scripted_lm({"ClarifyFromPassages": clarify, "WriteLongAnswer": LONG}))
    out = make(max_nodes=10, max_depth=2, verify=False)(question=AQ)
    assert out.n_duplicates == 0 and lm.engine.count("SelfVerify") == 0
    # depth 1: fred and its lower-case twin; depth 2: fred again under each of them
    assert [(n["depth"], n["question"]) for n in out.tree[1:]] == [
        (1, fred), (1, lower), (2, fred), (2, fred)]
    assert len(out.interpretations) == 4
    # the same replies with verification: the twin and both repeats are duplicates
    lm = use_lm(scripted_lm({"ClarifyFromPassages": clarify, "SelfVerify": {"valid": True},
                             "WriteLongAnswer": LONG}))
    out = make(max_nodes=10, max_depth=2)(question=AQ)
    assert [n["question"] for n in out.tree[1:]] == [fred] and out.n_duplicates == 2


def test_dedup_compares_with_pruned_nodes_too(use_lm):
    """Declared deviation: a pair repeating a *pruned* node is dropped unverified (the
    release's ``check_unique`` compares with the valid nodes only, so it would verify it
    again)."""
    bad = "Which Weasley bad bravo?"

    def clarify(inputs):
        q = inputs["question"]
        if q == AQ:
            return pairs(("Which Weasley alpha?", "a"), (bad, "bad b"))
        if q == "Which Weasley alpha?":
            return pairs((bad, "bad b"))  # proposes the pruned reading again
        return pairs()

    lm = use_lm(scripted_lm({"ClarifyFromPassages": clarify,
                             "SelfVerify": valid_unless("bad"), "WriteLongAnswer": LONG}))
    out = make(min_nodes=0)(question=AQ)
    assert [n["question"] for n in out.tree[1:]] == ["Which Weasley alpha?", bad]
    assert out.tree[2]["pruned"]
    assert out.n_duplicates == 1
    assert lm.engine.count("SelfVerify") == 2  # the repeat was never verified


def test_evidence_is_sought_only_in_the_parents_passages(use_lm):
    """Declared deviation: a node's answer-containing passage comes from its parent's ``k``
    re-ranked passages. Here the answer of George's child ("James Phelps") sits only in the
    passage Fred's branch read; the release (every passage selected in the tree) or a pool-wide
    search would verify against that passage, this program against George's, which it cites."""
    from ambiqa.testing import KeywordEncoder

    aq = "Who played a Weasley twin?"
    twin = "Who played George's twin?"
    docs = [Passage("family", "Weasleys", "The Weasleys are a large wizarding family."),
            Passage("fred", "Fred Weasley", "James Phelps played Fred."),
            Passage("george", "George Weasley", "Oliver Phelps played George.")]

    def clarify(inputs):
        q = inputs["question"]
        if q == aq:
            return pairs(("Who played Fred?", "James Phelps"),
                         ("Who played George?", "Oliver Phelps"))
        if q == "Who played George?":
            return pairs((twin, "James Phelps"))
        return pairs()

    lm = use_lm(scripted_lm({"ClarifyFromPassages": clarify, "SelfVerify": {"valid": True},
                             "WriteLongAnswer": LONG}))
    encoder = KeywordEncoder({"Fred": [1, 0, 0], "George": [0, 1, 0]}, fallback=[0, 0, 1])
    prog = TreeOfClarifications(InMemoryRetriever(docs), encoder=encoder, n_retrieve=3, k=1,
                                max_workers=1)
    out = prog(question=aq)
    by_q = {n["question"]: n for n in out.tree}
    assert by_q["Who played Fred?"]["context"] == ["fred"]  # Fred's branch read it first
    assert by_q["Who played George?"]["context"] == ["george"]
    child = by_q[twin]
    assert child["parent"] == by_q["Who played George?"]["id"]
    assert child["passages"] == ["george"]
    verified = {value(inp, "answer"): inp["passage"] for key, inp in lm.engine.calls
                if key == "SelfVerify" and "Oliver" not in value(inp, "answer")}
    assert len(verified) == 1  # both "James Phelps" nodes: Fred's (from the root's passage)
    assert all("James Phelps played Fred" not in v for v in verified.values())
    twin_call = [inp["passage"] for key, inp in lm.engine.calls
                 if key == "SelfVerify" and inp["passage"].count("Oliver Phelps played George")]
    assert twin_call  # the twin's verifier read George's passage, not Fred's


def test_long_answer_reads_the_kept_nodes_evidence_before_the_roots_passages(use_lm):
    """Declared deviation: the answer step reads the kept nodes' answer-containing passages
    first, then the root's re-ranked passages, ``k`` in all. The release re-ranks the whole
    pool against the AQ for it (the root's top ``k``), which here would hold Fred's passage
    and miss George's, the only one holding the deep node's answer."""
    from ambiqa.testing import KeywordEncoder

    aq = "Who played a Weasley twin?"
    deep = "Who played George in the second film?"
    docs = [Passage("family", "Weasleys", "The Weasleys are a large wizarding family."),
            Passage("fred", "Fred Weasley", "James Phelps played Fred."),
            Passage("george", "George Weasley", "Oliver Phelps played George.")]

    def clarify(inputs):
        q = inputs["question"]
        if q == aq:
            return pairs(("Who played George?", "Oliver Phelps"))
        return pairs((deep, "Oliver Phelps")) if q == "Who played George?" else pairs()

    lm = use_lm(scripted_lm({"ClarifyFromPassages": clarify, "SelfVerify": {"valid": True},
                             "WriteLongAnswer": LONG}))
    encoder = KeywordEncoder({"Fred": [1, 0, 0.5], "George": [0, 1, 0]}, fallback=[0, 0, 1])
    out = TreeOfClarifications(InMemoryRetriever(docs), encoder=encoder, n_retrieve=3, k=2,
                               max_workers=1)(question=aq)
    assert out.tree[0]["context"] == ["family", "fred"]  # the release's answer passages
    assert [n["passages"] for n in out.tree[1:]] == [["family"], ["george"]]
    assert [p["id"] for p in out.passages] == ["family", "george"]
    (write,) = [inp for key, inp in lm.engine.calls if key == "WriteLongAnswer"]
    assert "Oliver Phelps played George." in write["passages"]
    assert "James Phelps played Fred." not in write["passages"]


def test_dedup_same_question_or_same_answer_to_near_identical_question(use_lm):
    fred = "Who played Fred Weasley in the Harry Potter films?"
    george = "Who played George Weasley in the Harry Potter films?"

    def clarify(inputs):
        q = inputs["question"]
        if q == AQ:
            return pairs((fred, "James Phelps"),
                         ("who played fred weasley in the harry potter films", "J. Phelps"),
                         ("In the Harry Potter films, who played Fred Weasley?", "James Phelps"),
                         (george, "Oliver Phelps"),
                         ("Who is the twin brother of the actor of Fred?", "Oliver Phelps"))
        if q == fred:  # proposes a node that already exists one level up
            return pairs((george, "Oliver Phelps"))
        return pairs()

    lm = use_lm(scripted_lm({"ClarifyFromPassages": clarify,
                             "SelfVerify": {"valid": True}, "WriteLongAnswer": LONG}))
    out = make(max_nodes=10)(question=AQ)
    assert [n["question"] for n in out.tree[1:]] == [
        fred, george, "Who is the twin brother of the actor of Fred?"]
    assert out.n_duplicates == 3
    assert lm.engine.count("SelfVerify") == 3  # duplicates are never verified


def test_restores_pruned_nodes_nearest_the_root_first(use_lm):
    def clarify(inputs):
        q = inputs["question"]
        if q == AQ:
            return pairs(("Which Weasley alpha?", "a"), ("Which Weasley bad bravo?", "bad b"))
        if q == "Which Weasley alpha?":
            return pairs(("Which Weasley alpha bad one?", "bad a1"),
                         ("Which Weasley alpha bad two?", "bad a2"))
        return pairs()

    lm = use_lm(scripted_lm({"ClarifyFromPassages": clarify,
                             "SelfVerify": valid_unless("bad"), "WriteLongAnswer": LONG}))
    out = make(min_nodes=3)(question=AQ)
    assert [i["question"] for i in out.interpretations] == [
        "Which Weasley alpha?", "Which Weasley bad bravo?", "Which Weasley alpha bad one?"]
    by_q = {n["question"]: n for n in out.tree}
    assert by_q["Which Weasley bad bravo?"]["restored"]
    assert not by_q["Which Weasley bad bravo?"]["pruned"]
    assert by_q["Which Weasley alpha bad one?"]["restored"]
    assert by_q["Which Weasley alpha bad two?"]["pruned"]
    assert clarified(lm) == [AQ, "Which Weasley alpha?"]
    # the long answer is written from exactly the kept pairs
    (write,) = [inp for key, inp in lm.engine.calls if key == "WriteLongAnswer"]
    assert "Which Weasley bad bravo?" in write["interpretations"]
    assert "Which Weasley alpha bad two?" not in write["interpretations"]


def test_nothing_found_gives_no_interpretation(use_lm):
    """Issue 12 item 9: the old fallback made the whole paragraph a "short answer"."""
    lm = use_lm(scripted_lm({"ClarifyFromPassages": pairs(),
                             "WriteLongAnswer": {"long_answer": "Rupert Grint played Ron."}}))
    out = make()(question=AQ)
    assert out.fallback == "no_interpretations"
    assert out.interpretations == []
    assert out.answer == "Rupert Grint played Ron."
    assert [p["id"] for p in out.passages] == out.tree[0]["context"]
    assert lm.engine.count("SelfVerify") == 0 and lm.engine.count("WriteLongAnswer") == 1


def test_each_expansion_reranks_the_pool_for_its_own_question(use_lm):
    def clarify(inputs):
        if inputs["question"] == AQ:
            return pairs(("Who played George Weasley?", "Oliver Phelps"))
        return pairs()

    use_lm(scripted_lm({"ClarifyFromPassages": clarify, "SelfVerify": {"valid": True},
                        "WriteLongAnswer": LONG}))
    out = make(k=5)(question=AQ)
    assert out.tree[0]["context"][0] != "george"
    assert out.tree[1]["context"][0] == "george"
    # the clarification cited passage 1 (not George's); the answer-containing one wins
    assert out.tree[1]["passages"] == ["george"]
    assert out.trace["retriever_calls"] == 1  # one pool, re-ranked per node
    assert out.passages[0]["id"] == "george"  # answer passages come first


def test_unparseable_steps_degrade_and_are_recorded(use_lm):
    use_lm(scripted_lm({"ClarifyFromPassages": branching("x"),
                        "SelfVerify": "no fields here",
                        "WriteLongAnswer": LONG}))
    out = make(max_nodes=2)(question=AQ)
    assert len(out.interpretations) == 2  # an unreadable verdict keeps the node
    assert any(e.startswith("self_verify") for e in out.trace["events"])
    assert out.trace["lm_calls"] <= 20

    use_lm(scripted_lm({"ClarifyFromPassages": "garbage", "WriteLongAnswer": LONG}))
    out = make()(question=AQ)
    assert out.fallback == "no_interpretations"
    assert any(e.startswith("clarify") for e in out.trace["events"])


def test_config_and_registry():
    prog = build_program("toc", retriever=InMemoryRetriever(PASSAGES), max_nodes=4,
                         encoder=FakeEncoder())
    assert isinstance(prog, TreeOfClarifications)
    assert prog.config() == {"n_retrieve": 100, "k": 5, "max_depth": 3, "max_nodes": 4,
                             "max_failed": 3, "min_nodes": 2, "verify": True,
                             "max_workers": None, "verification": "paper",
                             "max_lm_calls": 20, "trim_sentences": None}


@pytest.mark.parametrize("bad", [{"k": 0}, {"max_depth": 0}, {"max_nodes": "3"},
                                 {"min_nodes": 11}, {"max_workers": 0}, {"max_failed": True},
                                 {"verification": "lenient"}, {"max_lm_calls": 1},
                                 {"max_lm_calls": "20"}])
def test_bad_settings_are_clear_errors(bad):
    with pytest.raises(ConfigError):
        TreeOfClarifications(InMemoryRetriever(PASSAGES), encoder=FakeEncoder(), **bad)


# ---- the LM-call cap (issue 12 item 7) ------------------------------------------------------


def test_lm_call_cap_stops_the_tree_and_is_recorded(use_lm):
    lm = use_lm(scripted_lm({"ClarifyFromPassages": branching("x", "y", "z"),
                             "SelfVerify": {"valid": True}, "WriteLongAnswer": LONG}))
    out = make(max_nodes=10, max_lm_calls=6)(question=AQ)
    # root clarify + 3 verifications + one expansion = 5; its 3 pairs could not be verified
    # within the cap, so they never became nodes; the answer is the 6th call
    assert out.stop_reason == "max_lm_calls"
    assert out.trace["lm_calls"] == 6 == len(lm.engine.calls)
    assert lm.engine.count("WriteLongAnswer") == 1
    assert len(out.tree) == 4 and out.n_over_limit == 3
    assert any("LM call cap" in e for e in out.trace["events"])


def test_lm_call_cap_bounds_a_bushy_tree_with_many_pruned_nodes(use_lm):
    lm = use_lm(scripted_lm({"ClarifyFromPassages": branching("g", "bad", "bad2", "bad3"),
                             "SelfVerify": valid_unless("bad"), "WriteLongAnswer": LONG}))
    out = make(max_nodes=10, max_failed=10, max_depth=10)(question=AQ)
    assert len(lm.engine.calls) <= 20
    assert out.stop_reason == "max_lm_calls"


def test_lm_call_cap_with_concurrent_siblings(use_lm):
    lm = use_lm(scripted_lm({"ClarifyFromPassages": branching("x", "y", "z"),
                             "SelfVerify": {"valid": True}, "WriteLongAnswer": LONG}))
    make(max_nodes=10, max_lm_calls=6, max_workers=4)(question=AQ)
    assert len(lm.engine.calls) <= 6


# ---- evidence on word boundaries (item 8) and cosine re-ranking (item 10) --------------------


@pytest.mark.parametrize("answer,text,expected", [
    ("2", "The film was released in 2001.", False),
    ("Paris", "A Parisian cafe.", False),
    ("Paris", "He lived in Paris, France.", True),
    ("2", "Season 2 aired in the autumn.", True),
    ("The Beatles", "a song by beatles in 1965", True),
    ("", "anything", False)])
def test_contains_answer_matches_whole_words(answer, text, expected):
    from ambiqa.programs.toc import contains_answer

    assert contains_answer(answer, text) is expected


def test_evidence_skips_a_cited_passage_that_holds_the_answer_only_inside_a_word(use_lm):
    docs = [Passage("y2001", "Film release", "The film release was in 2001."),
            Passage("s2", "Season", "Season 2 of the show aired in the autumn.")]
    aq = "When was the film release?"
    lm = use_lm(scripted_lm({
        "ClarifyFromPassages": lambda inp: pairs(("Which season of the show?", "2"))
        if inp["question"] == aq else pairs(),
        "SelfVerify": {"valid": True}, "WriteLongAnswer": LONG}))
    prog = TreeOfClarifications(InMemoryRetriever(docs), encoder=FakeEncoder(), n_retrieve=2,
                                k=2, max_workers=1)
    out = prog(question=aq)
    assert out.tree[0]["context"][0] == "y2001"  # the clarification cited passage 1
    assert out.tree[1]["passages"] == ["s2"]  # old substring rule: "y2001" ("2" in "2001")
    (verify,) = [inp for key, inp in lm.engine.calls if key == "SelfVerify"]
    assert "Season 2" in verify["passage"]


class ScaledEncoder(SharedResource):
    """Unnormalised vectors: a dot product prefers the long "big" passage, cosine the "near"
    one."""

    def encode(self, texts):
        rows = []
        for t in texts:
            if "near" in t:
                rows.append([0.9, 0.1])
            elif "big" in t:
                rows.append([5.0, 5.0])
            else:
                rows.append([1.0, 0.0])
        return np.asarray(rows, dtype=np.float32)


def test_reranking_is_by_cosine_whatever_the_encoder(use_lm):
    docs = [Passage("big", "big", "big passage"), Passage("near", "near", "near passage")]
    use_lm(scripted_lm({"ClarifyFromPassages": pairs(), "WriteLongAnswer": LONG}))
    prog = TreeOfClarifications(InMemoryRetriever(docs), encoder=ScaledEncoder(),
                                n_retrieve=2, k=1, max_workers=1)
    out = prog(question="Which one?")
    assert out.tree[0]["context"] == ["near"]
