"""benchmarks/compile_choice.py: the candidate table read back from a real (scripted-LM)
compile's manifest and its answers file, the objective split into its two halves."""

from __future__ import annotations

import json

import dspy
import pytest

import ambiqa
from ambiqa.data import demo_corpus_path, load_corpus, load_dataset
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import ScriptedEngine, titles_as_answers
from benchmarks import compile_choice


def _compile(use_lm, out):
    """vanilla_rag compiled (labeled, str-rouge, with the choice) on a scripted LM."""
    use_lm(dspy.LM("scripted/fake", cache=False, num_retries=0, engine=ScriptedEngine({
        "ClarifyFromPassages": titles_as_answers,
        "WriteLongAnswer": lambda inp: {"long_answer": "Answers: " + inp["interpretations"]},
    })))
    rag = VanillaRAG(InMemoryRetriever(load_corpus(demo_corpus_path())), k=2)
    return ambiqa.compile(rag, load_dataset("demo:train"), optimizer="labeled", k=2,
                          metric="str-rouge", out=out)


def test_the_table_splits_the_objective_and_marks_what_shipped(use_lm, tmp_path):
    out = tmp_path / "rag.json"
    result = _compile(use_lm, out)
    m = compile_choice.measure(out, "demo:train")
    sel = result.report.settings["selection"]
    assert m["shipped"] == sel["shipped"] and m["n_val"] == sel["n_val"] == 3
    rows = {c["label"]: c for c in m["candidates"]}
    zero = rows["zero-shot"]
    # the objective is the mean of its halves, question by question, so also on average
    assert abs(zero["mean"] - (zero["str_em"] + zero["rouge_l"]) / 2) < 1e-9
    assert rows["input"]["same_as"] == "zero-shot"
    scored = [c for c in m["candidates"] if not c.get("same_as") and c["label"] != "zero-shot"]
    assert scored and all(len(c["str_em_vs_zero_shot"]) == 2 for c in scored)
    # each candidate's readings are kept beside its answers, and read back per candidate
    side = [json.loads(line) for line in out.with_name("rag.selection.jsonl").read_text()
            .splitlines()]
    assert all(isinstance(r["interpretations"], list) for r in side)
    assert zero["readings"] == sum(len(r["interpretations"]) for r in side
                                   if r["candidate"] == "zero-shot") / 3
    assert 0.0 <= zero["gold_covered"] <= 1.0
    text = compile_choice.render(m, "python -m benchmarks.compile_choice x")
    assert f"**{m['shipped']}**" in text and "(the same program as zero-shot)" in text
    assert "undecided at n = 3" in text or "above 0" in text or "at or below 0" in text
    assert f"| {zero['readings']:.2f} ({zero['gold_covered']:.3f}) |" in text
    compile_choice.main([str(out), "--data", "demo:train", "--out", str(tmp_path / "c.md")])
    assert json.loads((tmp_path / "c.json").read_text())["shipped"] == m["shipped"]


class _WholeContextReader:
    """Answers every question with the whole long answer: D-F1 is then each pair's token F1
    against the answer, known without a model."""

    name = "whole-context"

    def answer(self, question: str, context: str) -> str:
        return context


def test_a_reader_adds_d_f1_and_dr_and_what_a_dr_objective_would_ship(use_lm, tmp_path):
    import math

    out = tmp_path / "rag.json"
    _compile(use_lm, out)
    m = compile_choice.measure(out, "demo:train", reader=_WholeContextReader())
    assert m["reader"] == "whole-context"
    scored = [c for c in m["candidates"] if not c.get("same_as")]
    for c in scored:  # DR is the set-level statistic of the two means
        assert c["dr"] == pytest.approx(math.sqrt(c["d_f1"] * c["rouge_l"]))
        assert (c["label"] == "zero-shot") == ("dr_vs_zero_shot" not in c)
    assert m["shipped_by_dr"] == compile_choice.shipped_by(m["candidates"], "dr")
    assert m["shipped_by_dr_q"] == compile_choice.shipped_by(m["candidates"], "dr_q")
    for c in scored:  # the mean of per-question roots never exceeds the root of the means
        assert c["dr_q"] <= c["dr"] + 1e-9
    text = compile_choice.render(m, "python -m benchmarks.compile_choice x --reader r")
    assert "Read by `whole-context`" in text and "such a compile would have shipped" in text


def test_shipped_by_follows_the_guard_rule():
    rows = [{"label": "zero-shot", "dr": 0.3}, {"label": "a", "dr": 0.3},
            {"label": "b", "dr": 0.9, "same_as": "zero-shot"}]
    assert compile_choice.shipped_by(rows, "dr") == "zero-shot"  # a tie keeps zero-shot
    rows.append({"label": "c", "dr": 0.31})
    assert compile_choice.shipped_by(rows, "dr") == "c"  # a duplicate is never scored
