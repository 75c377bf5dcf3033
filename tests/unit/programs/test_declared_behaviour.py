"""Behaviour that issue 36's reading against the papers changed (docs/methods.md says the rest).

* Cosine scores no longer assume an injected encoder returns unit vectors
  (``SentenceReranker.scores``, the pool's ``@RR``, EoR's "emb" similarity).
* ``Diva.min_lm_rounds`` is the shortest chain of LM calls the program takes when retrieval
  returns passages; with nothing retrieved it takes one round fewer (no verification call), as
  ``AmbiqaProgram.min_lm_rounds`` and docs/methods.md say (issue 44 item 7).
"""

from __future__ import annotations

import numpy as np
import pytest

from ambiqa.programs.diva import Diva
from ambiqa.programs.eor import similarity_matrices
from ambiqa.retrieval.rerank import SentenceReranker
from ambiqa.testing import ScriptedRetriever, scripted_lm
from ambiqa.types import Passage


class LengthyEncoder:
    """Vectors whose direction carries the meaning and whose length does not: "far" points
    away from the query (cosine 0.32) but is 300x longer than "near" (cosine 0.995), so an
    unnormalised dot product (200 against 2) would rank it first."""

    name = "lengthy"

    def encode(self, texts, **_):
        out = []
        for t in texts:
            if "near" in t:
                out.append([1.0, 0.1])
            elif "far" in t:
                out.append([100.0, 300.0])
            else:  # the query
                out.append([2.0, 0.0])
        return np.asarray(out, dtype=np.float32)


PASSAGES = [Passage("far", "Far", "far away"), Passage("near", "Near", "near by")]


def test_sentence_reranker_ranks_by_cosine_whatever_the_encoders_scale():
    ranked = SentenceReranker(LengthyEncoder()).rerank("query", PASSAGES)
    assert [p.id for p in ranked] == ["near", "far"]
    scores = SentenceReranker(LengthyEncoder()).scores(["query"], PASSAGES)
    assert np.all(np.abs(scores) <= 1.0 + 1e-6)


def test_pool_rerank_ranks_by_cosine_whatever_the_encoders_scale():
    from ambiqa.retrieval.pool import PoolRetriever

    pool = PoolRetriever.__new__(PoolRetriever)  # only _rerank's encoder is needed
    pool.encoder = LengthyEncoder()
    ranked = pool._rerank("query", list(PASSAGES))
    assert [p.id for p in ranked] == ["near", "far"]
    assert all(abs(p.score) <= 1.0 + 1e-6 for p in ranked)


def test_eor_emb_similarity_is_a_cosine():
    sims = similarity_matrices(["near", "far", "query"], ["emb"], encoder=LengthyEncoder())
    emb = np.asarray(sims["emb"])
    assert np.all(np.abs(emb) <= 1.0 + 1e-6)
    assert emb[0][2] == pytest.approx(1 / np.sqrt(1.01), abs=1e-6)  # cos(near, query)


Q = "Who played the Weasley brothers?"
RON = "Who played Ron Weasley?"


def _useless_handlers(kind: str) -> dict:
    return {
        "TypeAmbiguity": {"reason": "r", "ambiguity_type": kind},
        "PseudoInterpretations": {"interpretations": [RON]},
        "VerifyRetrieval": {"evidence": "none", "verdict": "no"},
        "ClosedBookLongAnswer": {"long_answer": "From memory."},
    }


@pytest.mark.parametrize("skip_unambiguous", [False, True])
def test_diva_min_lm_rounds_is_its_shortest_path_when_retrieval_finds_passages(
        use_lm, skip_unambiguous):
    """Typed None and verified Useless is the shortest path over retrieved passages: with the
    rewrite always run (the paper, the default) it takes 4 sequential calls; skipping it for
    None takes 3. One interpretation, so one vote: calls and rounds are the same count."""
    lm = use_lm(scripted_lm(_useless_handlers("None")))
    retriever = ScriptedRetriever({"p": Passage("p", "P", "text")}, {}, ["p"])
    prog = Diva(retriever, encoder=LengthyEncoder(), skip_unambiguous=skip_unambiguous)
    out = prog(question=Q)
    assert out.path == "closed_book" and out.verdict == "Useless"
    assert [key for key, _ in lm.engine.calls][-2:] == ["VerifyRetrieval", "ClosedBookLongAnswer"]
    assert len(lm.engine.calls) == prog.min_lm_rounds == (3 if skip_unambiguous else 4)


@pytest.mark.parametrize("skip_unambiguous", [False, True])
def test_diva_with_nothing_retrieved_takes_one_round_fewer_than_its_minimum(
        use_lm, skip_unambiguous):
    """The path ``min_lm_rounds`` leaves out: nothing retrieved, nothing to verify, so the
    verdict is Useless without a vote: type (-> rewrite) -> closed book, 3 calls (2 with the
    shortcut). If this path ever verifies, or min_lm_rounds comes to count it, this fails."""
    lm = use_lm(scripted_lm(_useless_handlers("None")))
    prog = Diva(ScriptedRetriever({}, {}), encoder=LengthyEncoder(),
                skip_unambiguous=skip_unambiguous)
    out = prog(question=Q)
    assert out.path == "closed_book" and out.verdict == "Useless"
    assert lm.engine.count("VerifyRetrieval") == 0
    assert len(lm.engine.calls) == prog.min_lm_rounds - 1 == (2 if skip_unambiguous else 3)


# ---- the minimums VerDICt, EoR and ReSP state are the ones their instances carry -----------
def _stages(lm) -> list[str]:
    """The signatures called, consecutive repeats merged: for a program whose concurrent calls
    are all of one kind, each stage is one dependent round."""
    out: list[str] = []
    for key, _ in lm.engine.calls:
        if not out or out[-1] != key:
            out.append(key)
    return out


@pytest.mark.parametrize(("long_answer", "rounds"), [(True, 3), (False, 2)])
def test_verdict_min_lm_rounds_follows_long_answer(use_lm, long_answer, rounds):
    """relax -> read (one passage, so one call) -> long answer; without the long answer the
    pairs are written out with no call: 2, set by the constructor."""
    from ambiqa.programs.verdict import VerDICt
    from ambiqa.testing import FixedRetriever

    lm = use_lm(scripted_lm({
        "RelaxQuery": {"relaxed_query": "Weasley actors"},
        "InterpretFromPassage": {"abstain": False, "interpretation": RON,
                                 "answer": "Rupert Grint"},
        "WriteLongAnswer": {"long_answer": "Rupert Grint played Ron."}}))
    prog = VerDICt(FixedRetriever([Passage("p", "P", "Rupert Grint played Ron.")]),
                   n_passages=1, rerank_depth=0, long_answer=long_answer)
    prog(question=Q)
    assert len(lm.engine.calls) == prog.min_lm_rounds == rounds


def test_verdict_with_nothing_retrieved_takes_fewer_rounds_than_its_minimum(use_lm):
    from ambiqa.programs.verdict import VerDICt
    from ambiqa.testing import FixedRetriever

    lm = use_lm(scripted_lm({"RelaxQuery": {"relaxed_query": "Weasley actors"},
                             "ClosedBookLongAnswer": {"long_answer": "From memory."}}))
    prog = VerDICt(FixedRetriever([]), rerank_depth=0)
    out = prog(question=Q)
    assert out.grounded is False
    assert _stages(lm) == ["RelaxQuery", "ClosedBookLongAnswer"]
    assert prog.min_lm_rounds == 3


@pytest.mark.parametrize(("pool", "weights", "stages"), [
    (("Wiki@2", "ReFree"), None, ["ShortAnswer"]),
    (("PK",), None, ["BackgroundDocument", "ShortAnswer"]),
    (("ReFree", "PK"), {"PK": 0.05}, ["ShortAnswer"]),  # PK at or below t: never run
    (("Wiki@2@CP",), None, ["CompressForQuery", "ShortAnswer"]),
    (("PK&Wiki@2@CP",), None, ["BackgroundDocument", "CompressForQuery", "ShortAnswer"]),
    (("(PK&Wiki@2)@RR@2",), None, ["BackgroundDocument", "ShortAnswer"]),
])
def test_eor_min_lm_rounds_is_the_deepest_active_members_chain(use_lm, pool, weights, stages):
    """The constructor applies the comment: 1 reader round plus the deepest active member's
    LM steps before reading (PK, then @CP); each scripted run here takes exactly that chain."""
    from ambiqa.programs.eor import EoR
    from ambiqa.retrieval.base import InMemoryRetriever

    lm = use_lm(scripted_lm({"ShortAnswer": {"answer": "Rupert Grint"},
                             "BackgroundDocument": {"background": "Background: Ron."},
                             "CompressForQuery": {"relevant": "Rupert Grint played Ron."}}))
    lm.engine._signature_of("")  # build the table before EoR's threads call it
    wiki = InMemoryRetriever([Passage("w1", "Ron", "Rupert Grint played Ron Weasley."),
                              Passage("w2", "Fred", "James Phelps played Fred Weasley.")])
    prog = EoR(wiki, pool=pool, retriever_weights=weights, encoder=LengthyEncoder(),
               metric_weights={"em": 1.0}, similarity_metrics=("em",))
    out = prog(question=Q)
    assert not out.failed_members
    assert _stages(lm) == stages
    assert prog.min_lm_rounds == len(stages)


def test_eor_min_lm_rounds_of_a_pool_is_its_longest_members():
    """Members run concurrently, so the question waits for the longest chain."""
    from ambiqa.programs.eor import EoR

    assert EoR(pool=("Wiki@2", "ReFree")).min_lm_rounds == 1
    assert EoR(pool=("Wiki@2", "PK", "ReFree")).min_lm_rounds == 2
    assert EoR(pool=("Wiki@2@CP", "PK&Wiki@2@CP", "PK")).min_lm_rounds == 3
    assert EoR().min_lm_rounds == EoR.min_lm_rounds == 2  # the default pool has PK


@pytest.mark.parametrize(("max_iter", "rounds"), [(3, 3), (1, 2)])
def test_resp_min_lm_rounds_follows_max_iter(use_lm, max_iter, rounds):
    """global summary -> judge (sufficient) -> generate; with one iteration there is no judge
    after the last round: 2, set by the constructor."""
    from ambiqa.programs.resp import ReSP
    from ambiqa.testing import FixedRetriever

    lm = use_lm(scripted_lm({"SummarizeGlobalEvidence": {"evidence": "Grint played Ron."},
                             "JudgeSufficiency": {"sufficient": True},
                             "AnswerFromMemories": {"answer": "Rupert Grint"}}))
    prog = ReSP(FixedRetriever([Passage("p", "P", "Rupert Grint played Ron.")]),
                max_iter=max_iter)
    prog(question=Q)
    assert len(lm.engine.calls) == prog.min_lm_rounds == rounds
