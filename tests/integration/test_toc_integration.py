"""Tree of Clarifications end to end on one real ASQA dev question with the real 0.5B model.

Bounded: one question, a pool of 10 passages re-ranked to ``k=2`` by the real sentence encoder,
``max_nodes=3``, ``max_depth=2``, one expansion at a time, replies capped at 256 tokens. The
0.5B model is a weak clarifier and judge, so only the tree's structure and the control-flow
invariants are checked, never the text. Retriever: the real ColBERT index over the corpus slice
when ``ambiqa.retrieval.colbert`` is available, else the token-overlap retriever over the whole
shared corpus (the one in use is recorded as the test's ``retriever`` property).
"""

from __future__ import annotations

import json
import time

import pytest

from ambiqa.programs.toc import TreeOfClarifications

pytestmark = pytest.mark.integration


def first_asqa_question(shared_data) -> str:
    with open(shared_data / "asqa" / "dev.json", encoding="utf-8") as fh:
        return json.load(fh)[0]["ambiguous_question"]


def test_toc_on_one_asqa_question(embedded_lm, use_lm, shared_data, retriever,
                                  record_property):
    from ambiqa.lm import FAST_MODEL, make_lm

    use_lm(make_lm(f"embedded:{FAST_MODEL}", cache=False, max_tokens=256))
    question = first_asqa_question(shared_data)
    prog = TreeOfClarifications(retriever, n_retrieve=10, k=2, max_nodes=3, max_depth=2,
                                max_workers=1)
    start = time.perf_counter()
    out = prog(question=question)
    elapsed = time.perf_counter() - start
    record_property("elapsed_s", round(elapsed, 1))
    calls = out.trace["calls_by_module"]
    print(f"elapsed {elapsed:.1f}s stop={out.stop_reason} nodes={len(out.tree)} "
          f"calls={calls} lm_latency={out.trace['lm_latency_s']}s events={out.trace['events']}")
    for node in out.tree:
        print(node)

    root, nodes = out.tree[0], out.tree[1:]
    assert root["question"] == question and root["depth"] == 0 and root["parent"] is None
    assert root["expanded"] and 1 <= len(root["context"]) <= 2
    by_id = {n["id"]: n for n in out.tree}
    for node in nodes:
        parent = by_id[node["parent"]]
        assert node["depth"] == parent["depth"] + 1 <= 2
        assert parent["expanded"] and not parent["pruned"]
        assert node["valid"] != node["pruned"] or node["restored"]
        if node["pruned"]:
            assert not node["expanded"]
    assert sum(n["valid"] for n in nodes) <= 3
    assert out.stop_reason in {"max_nodes", "max_depth", "max_failed", "exhausted"}
    # one verification per node (two only when DSPy's JSON fallback re-asks)
    assert len(nodes) <= calls.get("SelfVerify", 0) <= 2 * len(nodes)
    assert out.trace["retriever_calls"] == 1  # one pool, re-ranked per node
    assert isinstance(out.answer, str) and out.answer.strip()
    assert out.interpretations and 1 <= len(out.passages) <= 2
    kept = [n for n in nodes if n["valid"] or n["restored"]]
    if kept:
        assert [i["question"] for i in out.interpretations] == [n["question"] for n in kept]
    else:
        assert out.fallback == "no_interpretations"
    json.dumps(out.tree)
