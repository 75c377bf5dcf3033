"""benchmarks/program_table.py: the README's and BENCHMARKS' program tables come from the
stored runs, and the figures it prints are the runs' own."""

from __future__ import annotations

import json

import pytest


def test_committed_tables_equal_what_the_stored_runs_give(benchmark_script):
    table = benchmark_script("program_table")
    assert table.main(["--check"]) == 0


def _run_dir(path, rows):
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"program": "p", "data": "asqa:dev:4",
                                               "metrics": ["str-em", "rouge-l", "d-f1", "dr"],
                                               "reader": "extractive:x"}))
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _row(i, d_f1, rouge, answer, calls=2, error=None):
    return {"id": str(i), "question": "q", "error": error,
            "prediction": {"answer": answer},
            "cost": {"lm_calls": calls},
            "metrics": {} if error else {"str-em": d_f1, "rouge-l": rouge, "d-f1": d_f1}}


def test_a_row_reports_n_dr_the_paired_difference_and_median_words(benchmark_script, tmp_path,
                                                                     monkeypatch):
    table = benchmark_script("program_table")
    monkeypatch.setattr(table, "ROOT", tmp_path)
    base = [_row(i, 0.25, 0.25, "one two") for i in range(4)]
    better = [_row(i, 1.0, 0.25, "a b c d") for i in range(3)] + \
        [_row(3, 0, 0, "", error="LM unreachable")]  # a failed question scores 0
    _run_dir(tmp_path / "base", base)
    _run_dir(tmp_path / "new", better)
    monkeypatch.setattr(table, "BASELINE", "base")
    monkeypatch.setattr(table, "ASQA_ROWS", [table.AsqaRow("vanilla_rag", "", "base"),
                                             table.AsqaRow("diva", "x", "new"),
                                             table.AsqaRow("toc", "", "missing")])
    rows = [line.split(" | ") for line in table.asqa_table().splitlines()[2:]]
    assert len(rows) == 2  # a run directory not on disk is left out
    assert rows[0][:2] == ["| `vanilla_rag`", "4"]
    assert rows[0][5].startswith("0.250")  # sqrt(0.25 * 0.25)
    assert rows[1][:2] == ["| `diva` (x)", "4"]
    assert rows[1][5].startswith("0.375")  # sqrt(0.75 * 0.1875): the failure counts as 0
    assert rows[1][6].startswith("+0.125")
    assert rows[1][7] == "4 |"  # median words over the questions that did not fail


def test_the_block_must_be_marked_once(benchmark_script, tmp_path):
    table = benchmark_script("program_table")
    with pytest.raises(SystemExit, match="exactly one block"):
        table.replace_block("no markers here", "|t|", tmp_path / "README.md")
    text = f"before\n{table.BEGIN}\nold\n{table.END}\nafter"
    assert table.replace_block(text, "|new|", tmp_path) == \
        f"before\n{table.BEGIN}\n|new|\n{table.END}\nafter"
