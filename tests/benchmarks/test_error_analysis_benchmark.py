"""benchmarks/error_analysis.py: which questions count as failing, and the cause rules."""

from __future__ import annotations

import json

import pytest

from ambiqa.data import load_dataset


def _row(qid: str, dr: float, *, answer: str = "x", passages: tuple[str, ...] = (),
         error: str | None = None, **metrics: float) -> dict:
    return {"id": qid, "question": f"q{qid}", "error": error,
            "metrics": {"dr_q": dr, **metrics},
            "prediction": {"answer": answer,
                           "passages": [{"id": f"p{i}", "text": t}
                                        for i, t in enumerate(passages)]}}


def test_failing_takes_the_largest_shortfalls_and_counts_ties_and_errors(benchmark_script):
    ea = benchmark_script("error_analysis")
    program = {"a": _row("a", 0.5), "b": _row("b", 0.1), "c": _row("c", 0.2),
               "d": _row("d", 0.0), "e": _row("e", 0.9, error="LMError: timeout")}
    baseline = {"a": _row("a", 0.2), "b": _row("b", 0.4), "c": _row("c", 0.2),
                "d": _row("d", 0.0), "e": _row("e", 0.3)}
    ids, n_fail = ea.failing(program, baseline, ["a", "b", "c", "d", "e"], n=3)
    # e failed (scores 0: -0.3), b lost by 0.3 (split order breaks the tie), then the tie c
    assert ids == ["b", "e", "c"]
    assert n_fail == 4  # b, c, d and e; a improved


@pytest.mark.parametrize(("sig", "expected"), [
    ({"path": "closed_book", "coverage": 0.5, "str_em": 0.0, "d_f1": 0.0}, "verification"),
    ({"path": None, "coverage": 1.0, "str_em": 0.5, "d_f1": 0.0}, "metric artefact"),
    ({"path": None, "coverage": 0.0, "str_em": 0.0, "d_f1": 0.0}, "retrieval miss"),
    ({"path": None, "coverage": 1.0, "str_em": 0.5, "d_f1": 0.2}, "generation"),
    ({"path": "rag", "coverage": 0.5, "str_em": 0.5, "d_f1": 0.2, "interpretations": 1},
     "clarification"),
    ({"path": None, "coverage": 0.5, "str_em": 0.5, "d_f1": 0.2}, "other"),
])
def test_cause_rules_in_their_order(sig, expected, benchmark_script):
    ea = benchmark_script("error_analysis")
    full = {"error": None, "interpretations": 3, "gold_pairs": 3, **sig}
    assert ea.cause(full) == expected


@pytest.mark.parametrize(("sig", "expected"), [
    # a short answer that contains a gold answer but is not one: wordy, not wrong
    ({"coverage": 1.0, "str_em": 1.0, "em": 0.0}, "metric artefact"),
    ({"coverage": 1.0, "str_em": 1.0, "em": 1.0}, "other"),  # right (a tie with the baseline)
    ({"coverage": 0.0, "str_em": 0.0, "em": 0.0}, "retrieval miss"),
    ({"coverage": 1.0, "str_em": 0.0, "em": 0.0}, "generation"),
])
def test_cause_rules_for_short_answers_need_no_reader(sig, expected, benchmark_script):
    ea = benchmark_script("error_analysis")
    full = {"error": None, "path": None, "d_f1": None, "interpretations": 0,
            "gold_pairs": 1, **sig}
    assert ea.cause(full) == expected


def test_short_answer_runs_are_judged_by_f1_with_the_question_as_its_own_pair(
        tmp_path, shared_data, benchmark_script, monkeypatch):
    """WebQ/NQ/HotpotQA rows carry em/f1, not dr_q: failing is by F1, coverage and
    containment come from the example's answers, and no D-F1 reader is built."""
    ea = benchmark_script("error_analysis")
    monkeypatch.setattr("ambiqa.evaluation.reader.make_reader", lambda *a, **k: pytest.fail(
        "a short-answer analysis must not build a D-F1 reader"))
    ex = load_dataset("webq:dev:2")
    gold = str(list(ex[0]["answers"])[0])
    spec = {"data": "webq:dev:2", "metrics": ["em", "f1"]}
    runs = {}
    for name, rows in (
            ("prog", [{"id": ex[0]["id"], "question": ex[0]["question"], "error": None,
                       "metrics": {"em": 0.0, "f1": 0.0},
                       "prediction": {"answer": "Nowhere",
                                      "passages": [{"id": "p", "text": "an unrelated text"}]}},
                      {"id": ex[1]["id"], "question": ex[1]["question"], "error": None,
                       "metrics": {"em": 0.0, "f1": 0.5},
                       "prediction": {"answer": "x", "passages": []}}]),
            ("base", [{"id": ex[0]["id"], "question": ex[0]["question"], "error": None,
                       "metrics": {"em": 1.0, "f1": 1.0},
                       "prediction": {"answer": gold, "passages": []}},
                      {"id": ex[1]["id"], "question": ex[1]["question"], "error": None,
                       "metrics": {"em": 0.0, "f1": 0.0},
                       "prediction": {"answer": "y", "passages": []}}])):
        run = tmp_path / name
        run.mkdir()
        (run / "run.json").write_text(json.dumps({**spec, "program": name}))
        (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs[name] = run
    out = tmp_path / "report.md"
    assert ea.main(["--run", str(runs["prog"]), "--against", str(runs["base"]),
                    "--out", str(out)]) == 0
    text = out.read_text()
    assert "1 of 2 paired questions fail (per-question F1 of prog" in text
    assert "| ΔF1 | coverage | contains | EM |" in text
    assert "| retrieval miss | retrieval miss | -1.000 | 0.00 | 0.00 | 0.00 |" in text
    assert "– (no reader)" in text


def test_report_counts_hand_causes_and_keeps_the_rules_guess(tmp_path, shared_data,
                                                            benchmark_script):
    ea = benchmark_script("error_analysis")
    ex = load_dataset("asqa:dev:2")
    spec = {"program": "vanilla_rag", "data": "asqa:dev:2", "reader": "lm"}
    runs = {}
    for name, drs in (("prog", (0.0, 0.5)), ("base", (0.3, 0.1))):
        run = tmp_path / name
        run.mkdir()
        (run / "run.json").write_text(json.dumps({**spec, "program": name}))
        rows = [_row(e["id"], dr, answer="", passages=("nothing relevant",), **{
            "str-em": 0.0, "d-f1": 0.0}) for e, dr in zip(ex, drs, strict=True)]
        (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs[name] = run
    first = str(ex[0]["id"])
    notes = tmp_path / "notes.json"
    notes.write_text(json.dumps({first: {"cause": "generation", "note": "read by hand"}}))
    out = tmp_path / "report.md"
    assert ea.main(["--run", str(runs["prog"]), "--against", str(runs["base"]), "--n", "5",
                    "--notes", str(notes), "--out", str(out)]) == 0
    text = out.read_text()
    assert "1 of 2 paired questions fail" in text
    assert "| generation | 1 |" in text
    # the rule saw no answer in the passages: its guess stays visible beside the hand cause
    assert "| generation | retrieval miss |" in text and "read by hand" in text

    notes.write_text(json.dumps({first: {"cause": "bad luck", "note": ""}}))
    with pytest.raises(SystemExit):
        ea.main(["--run", str(runs["prog"]), "--against", str(runs["base"]),
                 "--notes", str(notes), "--out", str(out)])


def test_output_health_counts_cuts_loops_and_what_the_reader_recovers(benchmark_script):
    ea = benchmark_script("error_analysis")

    class Reader:  # recovers "Paris", misses everything else
        def answer(self, question: str, context: str) -> str:
            return "Paris" if "Paris" in context else ""

    examples = {"a": {"qa_pairs": [{"question": "capital?", "short_answers": ["Paris"]},
                                   {"question": "river?", "short_answers": ["Seine"]},
                                   {"question": "mayor?", "short_answers": ["Hidalgo"]}]}}
    rows = {"a": {"cost": {"truncated_calls": 1},
                  "prediction": {"answer": "It is Paris on the Seine. It is Paris on the "
                                           "Seine."}}}
    health = ea.output_health(rows, ["a"], examples, Reader())
    assert health == {"n": 1, "cut": 1, "loops": 1, "median_words": 12, "stated": 2,
                      "recovered": 1}
