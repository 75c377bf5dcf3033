"""benchmarks/verdict_rules.py: which extraction rules separate useful candidates, and when
a rule is chosen for ``candidate_check``."""

from __future__ import annotations

import dspy

EXAMPLE = dspy.Example(
    question="Who played Fred Weasley?",
    qa_pairs=[{"question": "Who played Fred Weasley in the films?",
               "short_answers": ["James Phelps"]}],
).with_inputs("question")


def _row(candidates: list[tuple[str, str, str]], rejected=()) -> dict:
    """A stored verdict row: (interpretation, answer, passage text) per candidate."""
    passages = [{"id": f"p{i}", "text": text} for i, (_, _, text) in
                enumerate([*candidates, *rejected])]
    cands = [{"question": q, "answer": a, "passage": f"p{i}"}
             for i, (q, a, _) in enumerate(candidates)]
    rej = [{"question": q, "answer": a, "passage": f"p{len(candidates) + i}", "rejected": "x"}
           for i, (q, a, _) in enumerate(rejected)]
    return {"id": "q", "question": EXAMPLE.question,
            "prediction": {"candidates": cands, "rejected": rej, "passages": passages}}


def test_useful_means_the_answer_and_a_gold_answer_contain_one_another(benchmark_script):
    vr = benchmark_script("verdict_rules")
    assert vr.is_useful("James Phelps", ["James Phelps"])
    assert vr.is_useful("the actor James Phelps", ["James Phelps"])
    assert vr.is_useful("Phelps", ["James Phelps"])
    assert not vr.is_useful("Oliver", ["James Phelps"])
    assert not vr.is_useful("", ["James Phelps"])


def test_candidates_carry_their_broken_rules_and_earlier_rejections_count(benchmark_script):
    vr = benchmark_script("verdict_rules")
    row = _row([("Who played Fred?", "James Phelps", "James Phelps played Fred."),
                ("Fred Weasley", "Tom Cruise", "Tom Cruise is an actor.")],
               rejected=[("Who played Fred?", "Fred Weasley", "Fred Weasley is a twin.")])
    got = vr.candidates_of(row, EXAMPLE)
    assert got == [{"broken": [], "useful": True},
                   {"broken": ["not a question"], "useful": False},
                   {"broken": ["answer restates the question"], "useful": False}]


def test_a_rule_is_chosen_only_when_its_breakers_are_less_useful_beyond_noise(benchmark_script):
    vr = benchmark_script("verdict_rules")
    good = {"broken": [], "useful": True}
    long_bad = {"broken": ["answer too long"], "useful": False}
    q_mixed = [{"broken": ["not a question"], "useful": True},
               {"broken": ["not a question"], "useful": False}]
    # every question: one useful clean candidate, one useless long one, a mixed pair
    table = {r["rule"]: r for r in vr.rule_table([[good, long_bad, *q_mixed]] * 12)}
    assert table["answer too long"]["breakers"] == 12
    assert table["answer too long"]["useful_breakers"] == 0.0
    assert table["answer too long"]["check"] is True
    # not-a-question breakers are useful half the time, exactly as often as the others
    assert table["not a question"]["check"] is False
    # a rule nobody breaks has no interval and is never chosen
    assert table["answer not in passage"]["breakers"] == 0
    assert table["answer not in passage"]["check"] is False
