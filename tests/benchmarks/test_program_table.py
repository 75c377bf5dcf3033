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
    assert rows[1][7] == "4"  # median words over the questions that did not fail


def test_the_block_must_be_marked_once(benchmark_script, tmp_path):
    table = benchmark_script("program_table")
    with pytest.raises(SystemExit, match="exactly one block"):
        table.replace_block("no markers here", "|t|", tmp_path / "README.md")
    text = f"before\n{table.BEGIN}\nold\n{table.END}\nafter"
    assert table.replace_block(text, "|new|", tmp_path) == \
        f"before\n{table.BEGIN}\n|new|\n{table.END}\nafter"


def _costly(i, computed, cached, output, wall):
    row = _row(i, 0.5, 0.5, "a b")
    row["cost"] = {"lm_calls": 2, "input_tokens": computed + cached, "computed_tokens": computed,
                   "cached_tokens": cached, "output_tokens": output, "wall_s": wall}
    return row


def test_both_tables_show_tokens_and_seconds_per_question(benchmark_script, tmp_path,
                                                          monkeypatch):
    table = benchmark_script("program_table")
    monkeypatch.setattr(table, "ROOT", tmp_path)
    _run_dir(tmp_path / "base", [_costly(0, 1000, 500, 200, 90.0),
                                 _costly(1, 2000, 0, 400, 110.0)])
    # answered from the response cache (LM calls, no tokens): no cost to show
    _run_dir(tmp_path / "cached", [_costly(0, 0, 0, 0, 0.03), _costly(1, 0, 0, 0, 0.03)])
    monkeypatch.setattr(table, "BASELINE", "base")
    monkeypatch.setattr(table, "ASQA_ROWS", [table.AsqaRow("vanilla_rag", "", "base"),
                                             table.AsqaRow("eor", "", "cached")])
    lines = table.asqa_table().splitlines()
    assert lines[0].endswith("| computed prompt tok/q | cached prompt tok/q | output tok/q "
                             "| s/q |")
    assert lines[2].split(" | ")[-4:] == ["1,500", "250", "300", "100 |"]
    assert lines[3].split(" | ")[-4:] == ["–", "–", "–", "– |"]

    monkeypatch.setattr(table, "README_ROWS", [
        table.ReadmeRow("`vanilla_rag`", "default", "base", lambda: "DR x"),
        table.ReadmeRow("`eor`", "unsure", "cached", lambda: "EM y", cost_run="base"),
        table.ReadmeRow("`gone`", "never", "missing", lambda: "–")])
    readme = table.readme_table().splitlines()
    assert readme[0] == ("| program | use it when | LM calls | computed prompt tok/q | cached "
                         "prompt tok/q | output tok/q | s/q | standing with the 1.5B (paired, "
                         "95% CI) |")
    assert readme[2] == "| `vanilla_rag` | default | 2.0 | 1,500 | 250 | 300 | 100 | DR x |"
    assert readme[3] == "| `eor` | unsure | 2.0 | 1,500 | 250 | 300 | 100 | EM y |"
    assert readme[4] == "| `gone` | never | – | – | – | – | – | – |"
