"""benchmarks/writer_length.py on two fabricated run directories and their artifact."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

WRITER_FIELDS = [{"prefix": p, "description": "-"}
                 for p in ("Question:", "Interpretations:", "Passages:", "Long Answer:")]


def _artifact(path: Path, demos: list[dict[str, str]], name: str = "writer") -> str:
    """A compiled artifact whose writer predictor is named ``name`` (found by its fields)."""
    state = {
        "clarify.clarify": {"demos": [{"question": "q", "interpretations": "x"}],
                            "signature": {"instructions": "-", "fields": []}},
        name: {"demos": demos, "signature": {"instructions": "rewritten by an optimizer",
                                             "fields": WRITER_FIELDS}},
    }
    art = {"format": "ambiqa-artifact", "schema_version": 2, "state": state,
           "manifest": {"program": "diva", "optimizer": {"name": "labeled", "k": 2}}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(art), encoding="utf-8")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(dir_: Path, program: str, answers: dict[str, str], sha: str | None = None,
         data: str = "asqa:dev:3", readings: dict[str, list[str]] | None = None) -> None:
    """A run directory; ``readings`` gives a question's interpretations' answers (stored as
    the repr the real rows hold)."""
    dir_.mkdir(parents=True)
    spec = {"program": program, "data": data, "lm": "fake"}
    if sha:
        spec["artifact_sha256"] = sha
    (dir_ / "run.json").write_text(json.dumps(spec), encoding="utf-8")
    rows = [{"id": i, "prediction": {"answer": a, "interpretations": repr(
        [{"question": f"{i}?", "answer": x} for x in (readings or {}).get(i, [])])}}
        for i, a in answers.items()]
    rows.append({"id": "broken", "prediction": {}, "error": "LM failed"})
    (dir_ / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n",
                                        encoding="utf-8")


def _refs(data: str) -> dict[str, list[str]]:
    assert data == "asqa:dev"  # the whole split, whatever slice the run took
    return {"q1": ["one two three four five six", "a b"],   # median 4
            "q2": ["w " * 10, "w " * 20],                    # median 15
            "q3": ["w " * 8]}                                 # 8


def test_answer_length_against_writer_demos(benchmark_script, tmp_path):
    wl = benchmark_script("writer_length")
    res = tmp_path / "benchmarks" / "results"
    demos = [
        {"question": "What was the period before the enlightenment called?",
         "interpretations": "- What period came before? -> Middle Ages\n"
                            "- What period came before? -> Late Middle Ages",
         "long_answer": "The period before the enlightenment was the Middle Ages."},
        {"question": "Who played Bonnie?",
         "interpretations": "- Who played Bonnie in the film? -> Cammie King\n"
                            "- Who played Bonnie on stage? -> Jane Doe",
         "long_answer": "In the film, Cammie King played Bonnie. On stage, Jane Doe did. "
                        "Both were children."},
    ]
    sha = _artifact(res / "compiled" / "diva-labeled.json", demos)
    # run.json names the artifact by an absolute path written on another checkout
    _run(res / "runs" / "diva-labeled", "/elsewhere/benchmarks/results/compiled/diva-labeled.json",
         {"q1": "a b c", "q2": "a bee zed d e", "q3": "a " * 20}, sha=sha,
         readings={"q1": ["bee", "zed"], "q2": ["Bee", "zed", "the zed"], "q3": ["x"]})
    _run(res / "runs" / "diva", "diva", {"q1": "w " * 100, "q2": "w " * 50})
    # the same answers re-scored elsewhere: one row, the copy named
    _run(res / "rescored" / "diva", "diva", {"q1": "w " * 100, "q2": "w " * 50})
    # not a long-answer data set: left out
    _run(res / "runs" / "webq", "vanilla_rag", {"q1": "x"}, data="webq:dev:1")

    m = wl.measure(tmp_path, refs=_refs)
    by_run = {r["run"]: r for r in m["runs"]}
    assert set(by_run) == {"runs/diva-labeled", "runs/diva"}
    compiled, zero = by_run["runs/diva-labeled"], by_run["runs/diva"]
    assert compiled["writer"]["status"] == "compiled"
    assert compiled["writer"]["predictor"] == "writer"  # by WriteLongAnswer's fields
    assert compiled["writer"]["artifact"] == "benchmarks/results/compiled/diva-labeled.json"
    assert compiled["writer"]["words"] == [9, 15]
    assert (compiled["median_words"], compiled["n"], compiled["failed"]) == (5, 3, 1)
    assert compiled["references_median"] == 8  # medians 4, 15, 8 of the 3 answered questions
    # two questions had two distinct reading answers (q2's three readings normalize to two):
    # q1's answer states neither (collapsed), q2's both
    assert compiled["multi_reading"] == {"questions": 2, "collapsed": 1, "answers_given": 4,
                                         "answers_stated": 2}
    assert compiled["median_sentences"] == 1
    assert zero["writer"]["status"] == "zero-shot" and zero["writer"]["words"] == []
    assert (zero["median_words"], zero["n"], zero["references_median"]) == (75, 2, 9.5)
    assert zero["copies"] == ["rescored/diva"]
    # the demos read: the first collapses two readings into one sentence with one answer
    first, second = compiled["writer"]["demos"]
    assert (first["sentences"], first["distinct_answers"], first["answers_stated"]) == (1, 2, 1)
    assert (second["sentences"], second["distinct_answers"], second["answers_stated"]) == (3, 2, 2)

    text = wl.render(m)
    assert "| `runs/diva-labeled` | diva | fake | labeled | 9/15 | 5 | 3 | 8 | 1 | 1/2 |" in text
    assert ("| `runs/diva` (= `rescored/diva`) | diva | fake | zero-shot | none | 75 | 2 | 9.5 "
            "| 1 | – |") in text


def test_changed_or_missing_artifact_is_unknown(benchmark_script, tmp_path):
    wl = benchmark_script("writer_length")
    res = tmp_path / "benchmarks" / "results"
    art = res / "compiled" / "a.json"
    _artifact(art, [{"long_answer": "x y"}], name="long_answer.write")
    _run(res / "runs" / "changed", "benchmarks/results/compiled/a.json", {"q1": "a"}, sha="0" * 64)
    _run(res / "runs" / "gone", "benchmarks/results/compiled/gone.json", {"q1": "a"})
    m = wl.measure(tmp_path, refs=_refs)
    status = {r["run"]: r["writer"]["status"] for r in m["runs"]}
    assert status == {"runs/changed": "changed", "runs/gone": "not stored"}
    assert "unknown (artifact not stored)" in wl.render(m)
