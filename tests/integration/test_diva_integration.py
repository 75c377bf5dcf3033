"""Diva end to end on one real ASQA dev question with the real embedded 0.5B model.

Bounded: one question, at most 2 pseudo-interpretations, 2 passages per query and 2 kept,
replies capped at 256 tokens; the real all-MiniLM-L6-v2 encoder prunes. The 0.5B model is a
weak reader, so only the structure of the Prediction and the control-flow invariants are
checked, never the answer text. Retriever: the real ColBERT index over the corpus slice when
``ambiqa.retrieval.colbert`` is available, else the token-overlap retriever over the whole
shared corpus (the one in use is recorded as the test's ``retriever`` property).
"""

from __future__ import annotations

import json
import time

import pytest

from ambiqa.programs.diva import Diva
from ambiqa.signatures.ambiguity import AMBIGUITY_TYPES

pytestmark = pytest.mark.integration

QUESTION_INDEX = 2  # "Who plays charlie on it's always sunny?" (Charlie Kelly / Charlie Day)


def test_diva_on_one_asqa_question(embedded_lm, use_lm, shared_data, retriever,
                                   record_property):
    from ambiqa.data.loaders import load_asqa
    from ambiqa.lm import FAST_MODEL, make_lm
    from ambiqa.retrieval.encoder import get_encoder

    use_lm(make_lm(f"embedded:{FAST_MODEL}", cache=False, max_tokens=256))
    example = load_asqa(shared_data / "asqa" / "dev.json", limit=QUESTION_INDEX + 1)[-1]
    prog = Diva(retriever, k_per_query=2, top_k=2, max_interpretations=2)
    # warm up outside the timed call: a fresh ColBERT index compiles its extensions on first
    # search, and the encoder loads on first use
    retriever.search(example.question, 1)
    get_encoder().encode(["warm up"])
    start = time.perf_counter()
    out = prog(question=example.question)
    elapsed = time.perf_counter() - start
    record_property("elapsed_s", round(elapsed, 1))
    print(f"elapsed {elapsed:.1f}s type={out.ambiguity_type} verdict={out.verdict} "
          f"path={out.path}\n readings={out.pseudo_interpretations}\n votes={out.votes}\n"
          f" answer={out.answer!r}\n gold={example.answers}\n trace={out.trace}")

    assert out.ambiguity_type is None or out.ambiguity_type in AMBIGUITY_TYPES
    assert 1 <= len(out.pseudo_interpretations) <= 2
    assert [v["interpretation"] for v in out.votes] == out.pseudo_interpretations
    assert out.verdict in {"Useful", "PartialUseful", "Useless"}
    assert out.path == ("closed_book" if out.verdict == "Useless" else "rag")
    ids = [p["id"] for p in out.passages]
    assert 1 <= len(ids) <= 2 and len(ids) == len(set(ids))
    assert all(retriever.get(pid) is not None for pid in ids)
    assert out.pool_size >= len(ids)
    for interp in out.interpretations:
        for pid in interp["passages"]:
            assert pid in ids and retriever.get(pid) is not None
    if out.path == "closed_book":
        assert out.interpretations == []
    assert isinstance(out.answer, str)
    calls = out.trace["calls_by_module"]
    assert calls.get("VerifyRetrieval", 0) >= len(out.pseudo_interpretations)
    assert out.trace["retriever_calls"] == len(out.pseudo_interpretations)
    json.dumps({k: v for k, v in out.items()})
