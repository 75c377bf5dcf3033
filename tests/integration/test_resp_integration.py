"""ReSP end to end on one real HotpotQA dev question with the real embedded 0.5B model.

Bounded: one question, ``max_iter=2``, ``k=3``, replies capped at 160 tokens. The 0.5B model is
a weak reasoner, so only the structure of the Prediction and the control-flow invariants are
checked, never the answer text. Retriever: the real ColBERT index over the corpus slice when
``ambiqa.retrieval.colbert`` is available, else the token-overlap retriever over the whole
shared corpus (the one in use is recorded as the test's ``retriever`` property).
"""

from __future__ import annotations

import json
import time

import pytest

from ambiqa.programs.resp import ReSP, normalize_question

pytestmark = pytest.mark.integration


def first_hotpotqa_question(shared_data) -> tuple[str, list[str]]:
    with open(shared_data / "hotpotqa" / "dev.jsonl", encoding="utf-8") as fh:
        rec = json.loads(fh.readline())
    answers = [s for obj in rec["answers_objects"] for s in obj.get("spans", [])]
    return rec["question_text"], answers


def test_resp_on_one_hotpotqa_question(embedded_lm, use_lm, shared_data, retriever,
                                       record_property):
    from ambiqa.lm import FAST_MODEL, make_lm

    # Same engine as the ``embedded_lm`` fixture (engines are shared per model), shorter replies.
    use_lm(make_lm(f"embedded:{FAST_MODEL}", cache=False, max_tokens=160))
    question, gold = first_hotpotqa_question(shared_data)
    start = time.perf_counter()
    out = ReSP(retriever, k=3, max_iter=2)(question=question)
    elapsed = time.perf_counter() - start
    record_property("elapsed_s", round(elapsed, 1))
    print(f"elapsed {elapsed:.1f}s  answer={out.answer!r}  gold={gold}  "
          f"stop={out.stop_reason}  calls={out.trace['calls_by_module']}")

    assert 1 <= out.iterations <= 2 and len(out.trajectory) == out.iterations
    assert out.stop_reason in {"sufficient", "max_iter", "planner_repeated",
                               "planner_unparseable"}
    first = out.trajectory[0]
    assert first["sub_question"] == question and first["local_summary"] is None
    searched = [normalize_question(s["sub_question"]) for s in out.trajectory]
    assert len(searched) == len(set(searched))
    for step in out.trajectory:
        assert 1 <= len(step["passage_ids"]) <= 3
        assert isinstance(step["global_summary"], str)
    if out.iterations == 2:
        assert isinstance(out.trajectory[1]["local_summary"], str)
    assert isinstance(out.answer, str)
    assert len(out.interpretations) == 1 and out.interpretations[0]["question"] == question
    ids = [p["id"] for p in out.passages]
    assert len(ids) == len(set(ids)) and out.interpretations[0]["passages"] == ids
    calls = out.trace["calls_by_module"]
    assert calls.get("AnswerFromMemories", 0) >= 1  # 2 only if DSPy's JSON fallback ran
    assert out.trace["retriever_calls"] == out.iterations
    json.dumps(out.trajectory)
