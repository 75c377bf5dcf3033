"""benchmarks/toc_verifier.py: silver nodes from data, judged through ToC's own check."""

from __future__ import annotations

import json
from types import SimpleNamespace

from ambiqa.programs.toc import TreeOfClarifications
from ambiqa.testing import scripted_lm

PASSAGE = {"id": "g1", "title": "Bonnie Blue Butler",
           "text": "Cammie King played Bonnie in Gone with the Wind, directed by Victor "
                   "Fleming in August 1939. Sadly the film ran long."}
EX = SimpleNamespace(
    id="q1", question="Who played Bonnie in Gone with the Wind?", gold_passages=[PASSAGE],
    qa_pairs=[{"question": "Who played Bonnie as a child in the 1939 film?",
               "short_answers": ["Cammie King"]},
              {"question": "Who played Bonnie on stage?", "short_answers": ["Nobody Here"]}])


def test_nodes_are_a_gold_answer_and_a_distractor_the_passage_states(benchmark_script):
    tv = benchmark_script("toc_verifier")
    nodes = tv.build_nodes(EX, max_pairs=2)
    # the second pair's answer is in no passage: one positive, one negative
    assert [(n["answer"], n["silver"]) for n in nodes] == [("Cammie King", True),
                                                          ("Victor Fleming", False)]
    # a number is picked when the gold answer is one; a sentence-opening word never is
    assert tv.negative_answer(PASSAGE["text"], EX.question, ["1940"]) == "1939"
    assert tv.negative_answer("Sadly it rained.", EX.question, ["Cammie King"]) is None
    # an alias of the gold answer (a shared word) is no distractor
    assert tv.negative_answer("Cammie King Jr was born.", EX.question, ["Cammie King"]) is None


def test_each_variant_judges_the_same_nodes_through_the_program(use_lm, benchmark_script):
    tv = benchmark_script("toc_verifier")

    def bare(inputs):  # the bare boolean says no to everything
        return {"valid": False}

    def quoted(inputs):  # quotes, then keeps the gold answer and drops the distractor
        keep = "Cammie" in inputs["answer"]
        return {"evidence": "Cammie King played Bonnie", "verdict": "yes" if keep else "no"}

    lm = use_lm(scripted_lm({"SelfVerify": bare, "SelfVerifyEvidence": quoted}))
    programs = {v: TreeOfClarifications(verification=v, max_workers=1)
                for v in ("paper", "evidence")}
    row = tv.judge_question(EX, programs, max_pairs=2)
    assert row["verdicts"] == {"paper": [False, False], "evidence": [True, False]}
    assert row["abstained"] == {"paper": [False, False], "evidence": [False, False]}
    assert lm.engine.count("SelfVerify") == 2 and lm.engine.count("SelfVerifyEvidence") == 2
    json.dumps(row)  # a row is plain JSON (appended to the rows file)
    paper, evidence = tv.stats([row], "paper"), tv.stats([row], "evidence")
    assert paper["recall"] == 0.0 and evidence["recall"] == 1.0
    assert evidence["negatives_kept"] == 0.0 and evidence["precision"] == 1.0
    md = tv.render([row, row], {"data": "asqa:train:2", "lm": "scripted",
                                "variants": ["paper", "evidence"], "command": "python x"})
    assert "| recall | 0.00" in md and "| Δ |" in md


def test_an_unparsed_reply_keeps_its_node_and_counts_as_an_abstention(use_lm, benchmark_script):
    tv = benchmark_script("toc_verifier")
    use_lm(scripted_lm({"SelfVerifyEvidence": lambda inputs: {
        "evidence": "-", "verdict": "maybe" if "Cammie" in inputs["answer"] else "no"}}))
    row = tv.judge_question(EX, {"evidence": TreeOfClarifications(verification="evidence",
                                                                  max_workers=1)}, 2)
    assert row["verdicts"]["evidence"] == [True, False]  # "maybe" abstains: the node is kept
    assert row["abstained"]["evidence"] == [True, False]
    s = tv.stats([row], "evidence")
    assert s["recall"] == 1.0 and s["abstained"] == 0.5
    assert s["recall_read"] != s["recall_read"]  # no read verdict on a positive: NaN
