"""EoR end to end on one real NQ question with the real embedded 0.5B model.

Bounded: one question, a 3-member pool (``Wiki@3``, ``BM25@RR@3``, ``ReFree``), replies capped
at 64 tokens, the real all-MiniLM-L6-v2 encoder for re-ranking and the embedding metric. The
BM25 source is a real bm25s index over the first 1,500 corpus passages plus the question's gold
passage, built into a temp dir. ``Wiki`` is the real ColBERT index over the corpus slice when
``ambiqa.retrieval.colbert`` is available, else the same BM25 index (recorded as the test's
``wiki`` property). The 0.5B model is a weak reader, so only the Prediction's structure and the
voter's invariants are checked, never the answer text.
"""

from __future__ import annotations

import json
import time

import pytest

from ambiqa.programs.eor import EoR, vote
from ambiqa.retrieval.bm25 import BM25Retriever

pytestmark = pytest.mark.integration

QUESTION_INDEX = 0  # "who is the owner of reading football club"
POOL = ("Wiki@3", "BM25@RR@3", "ReFree")


@pytest.fixture()
def nq_record(shared_data):
    with open(shared_data / "nq" / "oracle.jsonl", encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if n == QUESTION_INDEX:
                return json.loads(line)
    pytest.skip("NQ oracle file is shorter than expected")


@pytest.fixture()
def bm25(corpus_passages, nq_record, tmp_path):
    gold = {c["text"].strip() for c in nq_record["ctxs"]}
    head = corpus_passages[:1500]
    extra = [p for p in corpus_passages[1500:] if p.text.strip() in gold]
    return BM25Retriever.build(head + extra, tmp_path / "bm25")


@pytest.fixture()
def wiki(request, bm25, record_property):
    try:
        found, kind = request.getfixturevalue("colbert_retriever"), "colbert"
    except pytest.skip.Exception:
        found, kind = bm25, "bm25 (ColBERT retriever unavailable)"
    record_property("wiki", kind)
    print(f"wiki source: {kind}")
    return found


def test_eor_on_one_nq_question(embedded_lm, use_lm, nq_record, bm25, wiki, record_property):
    from ambiqa.lm import FAST_MODEL, make_lm

    use_lm(make_lm(f"embedded:{FAST_MODEL}", cache=False, max_tokens=64))
    prog = EoR(retriever=wiki, sources={"BM25": bm25}, pool=POOL, rerank_depth=10)
    start = time.perf_counter()
    out = prog(question=nq_record["question"])
    elapsed = time.perf_counter() - start
    record_property("elapsed_s", round(elapsed, 1))
    print(f"elapsed {elapsed:.1f}s winner={out.winner} answer={out.answer!r} "
          f"gold={nq_record['answers']}\n members={out.member_answers}\n "
          f"failed={out.failed_members}\n scores={out.scores}\n trace={out.trace}")

    # every member either answered or is recorded as failed, in pool order
    assert set(out.member_answers) | set(out.failed_members) == set(POOL)
    assert list(out.member_answers) == [s for s in POOL if s in out.member_answers]
    assert not set(out.member_answers) & set(out.failed_members)
    assert out.ignored_members == []
    m = len(out.member_answers)
    assert set(out.similarities) == {"em", "f1", "emb"}
    for mat in out.similarities.values():
        assert len(mat) == m and all(len(row) == m for row in mat)
        assert all(mat[i][j] == mat[j][i] for i in range(m) for j in range(m))
    assert set(out.scores) == set(out.member_answers)
    if out.winner is not None:
        assert out.answer == out.member_answers[out.winner]
        assert out.scores[out.winner] == max(out.scores.values())
        assert out.interpretations[0]["question"] == nq_record["question"]
        assert out.interpretations[0]["passages"] == [p["id"] for p in out.passages]
        assert out.answer and len(out.answer) < 400
    # re-voting from the recorded similarities (pure, no LM) reproduces the result
    assert vote(out.member_answers, out.similarities, prog.metric_weights,
                prog.retriever_weights, prog.threshold, prog.pooling) == (out.winner, out.scores)
    # cost: one reader call per member (plus DSPy's JSON fallback on a parse failure)
    assert out.trace["calls_by_module"].get("ShortAnswer", 0) >= len(POOL)
    assert out.trace["retriever_calls"] >= 2
    assert "ReFree" not in out.member_passages or out.member_passages["ReFree"] == []
