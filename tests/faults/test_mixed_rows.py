"""A question file mixing short-answer and ambiguous rows (issue 42, "stale or mixed rows").

Before: the file was scored with one metric set for the whole file -- short rows failed under
``str-em`` (every one an error row), or the ambiguity metrics vanished. Now each row is scored
by the metrics of its kind (short rows EM/F1, ambiguous rows STR-EM/D-F1, ROUGE-L/DR where they
have a long answer), each metric is reported over the rows that have it with its n, and the
report says the file is mixed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ambiqa.cli import build_parser
from ambiqa.cli.eval_cmds import evaluate_from_args
from ambiqa.data import demo_corpus_path
from ambiqa.data.corpus import load_corpus
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import vanilla_rag_lm

pytestmark = pytest.mark.fault("Bad inputs")

SHORT = [{"id": f"s{i}", "question": f"Who wrote play number {i}?",
          "answers": [f"Author {i}"]} for i in range(1, 4)]
AMBIGUOUS = [{"id": f"a{i}", "question": f"Who played Weasley brother {i}?",
              "qa_pairs": [{"question": f"Who played Weasley brother {i} in the films?",
                            "short_answers": [f"Actor {i}"]}],
              "long_answer": f"In the films, Actor {i} played him."} for i in range(1, 3)]


@pytest.fixture(scope="module")
def retriever():
    return InMemoryRetriever(load_corpus(demo_corpus_path()))


def _data(tmp_path: Path) -> Path:
    path = tmp_path / "mixed.jsonl"
    rows = [SHORT[0], AMBIGUOUS[0], SHORT[1], SHORT[2], AMBIGUOUS[1]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_default_metrics_of_a_mixed_file_are_both_sets():
    from ambiqa.data import metrics_for
    from ambiqa.data.loaders.common import make_example

    short = [make_example({**r}) for r in SHORT]
    amb = [make_example({**r, "long_answers": [r["long_answer"]]}) for r in AMBIGUOUS]
    assert metrics_for(short) == ["em", "f1"]
    assert metrics_for(amb) == ["str-em", "rouge-l", "d-f1", "dr"]
    assert metrics_for(short + amb) == ["str-em", "rouge-l", "d-f1", "dr", "em", "f1"]


def test_each_row_is_scored_by_the_metrics_of_its_kind(tmp_path, retriever, record_property):
    out = tmp_path / "run"
    args = build_parser().parse_args(["evaluate", "vanilla_rag", "--data",
                                      f"jsonl:{_data(tmp_path)}", "--metrics",
                                      "em,f1,str-em,rouge-l", "--out", str(out)])
    summary, _ = evaluate_from_args(args, lm=vanilla_rag_lm(), retriever=retriever,
                                    progress=False)
    assert summary["n"] == 5 and summary["n_errors"] == 0  # no short row fails under STR-EM
    m = summary["metrics"]
    assert m["em"]["n"] == m["f1"]["n"] == 3               # the short rows
    assert m["str-em"]["n"] == m["rouge-l"]["n"] == 2      # the ambiguous rows
    rows = {json.loads(line)["id"]: json.loads(line)
            for line in (out / "results.jsonl").read_text().splitlines()}
    assert set(rows["s1"]["metrics"]) == {"em", "f1"}
    assert set(rows["a1"]["metrics"]) == {"str-em", "rouge-l"}
    assert rows["s1"]["kind"] == "short" and rows["a1"]["kind"] == "ambiguous"
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["mixed_rows"] == {"short": 3, "ambiguous": 2}
    report = (out / "report.md").read_text()
    assert "mixing 3 short-answer and 2 ambiguous rows" in report
    record_property("cases", 1)


def test_a_failed_row_counts_only_in_the_metrics_of_its_kind(tmp_path):
    """A short row whose program failed scores 0 in EM and F1 (n = 3), not in STR-EM (n = 2)."""
    from ambiqa.api.jobs import load_data, metric_fns
    from ambiqa.evaluation.runs.runner import RunSpec, evaluate

    examples, spec = load_data(f"jsonl:{_data(tmp_path)}")

    class Program:
        def __call__(self, question: str):
            import dspy

            if "play number 2" in question:
                raise RuntimeError("the program failed")
            n = question.rstrip("?").split()[-1]
            return dspy.Prediction(answer=f"Author {n}" if "wrote" in question
                                   else f"In the films, Actor {n} played him.")

    names = ["em", "str-em"]
    summary = evaluate(Program(), examples, metric_fns(names, None), out_dir=tmp_path / "r",
                       spec=RunSpec(program="stub", data=spec, metrics=names),
                       progress=False)
    assert summary["n_errors"] == 1
    assert summary["metrics"]["em"]["n"] == 3 and summary["metrics"]["em"]["failed"] == 1
    assert summary["metrics"]["str-em"]["n"] == 2 and summary["metrics"]["str-em"]["failed"] == 0
    assert summary["metrics"]["em"]["mean"] == pytest.approx(2 / 3)  # the failed row is 0
    assert summary["metrics"]["str-em"]["mean"] == pytest.approx(1.0)  # and absent here


def test_a_file_of_one_kind_keeps_its_metric_set(tmp_path, retriever):
    """Explicit EM on ambiguous rows (scored from their flattened short answers) is unchanged
    for a file of one kind: the per-kind choice applies to mixed files only."""
    path = tmp_path / "amb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in AMBIGUOUS))
    args = build_parser().parse_args(["evaluate", "vanilla_rag", "--data", f"jsonl:{path}",
                                      "--metrics", "em,str-em", "--out", str(tmp_path / "r")])
    summary, _ = evaluate_from_args(args, lm=vanilla_rag_lm(), retriever=retriever,
                                    progress=False)
    assert summary["metrics"]["em"]["n"] == summary["metrics"]["str-em"]["n"] == 2
    assert "mixed_rows" not in json.loads((tmp_path / "r" / "summary.json").read_text())
