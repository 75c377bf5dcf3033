"""benchmarks/compile_threads.py: the paired table and the same-traces check."""

from __future__ import annotations

import dspy


def _program(answer: str) -> dspy.Module:
    program = dspy.Predict("question -> answer")
    program.demos = [dspy.Example(question="q", answer=answer, augmented=True)]
    return program


def test_same_demos_give_the_same_digest_and_others_do_not(benchmark_script):
    ct = benchmark_script("compile_threads")
    assert ct.demos_digest(_program("a")) == ct.demos_digest(_program("a"))
    assert ct.demos_digest(_program("a")) != ct.demos_digest(_program("b"))


def test_table_gives_each_run_its_speed_up_over_the_first_and_says_where_traces_differ(
        benchmark_script):
    ct = benchmark_script("compile_threads")
    run = {"questions": 4, "lm_calls": 28, "computed_tokens": 9000, "output_tokens": 1500,
           "traces_kept": 10}
    result = {"command": "python benchmarks/compile_threads.py --n 4", "program": "diva",
              "lm": "embedded", "index": "dense:wiki-dense", "created": "now",
              "runs": [{**run, "threads": 1, "wall_s": 400.0, "demos": "x"},
                       {**run, "threads": 2, "wall_s": 250.0, "demos": "y"}]}
    rows = [line for line in ct.render(result).splitlines() if line.startswith("| ")][1:]
    assert rows[0].split(" | ")[:5] == ["| 1", "4", "400", "100", "1.00×"]
    assert rows[1].split(" | ")[:5] == ["| 2", "4", "250", "62", "1.60×"]
    assert rows[0].endswith("| yes |") and rows[1].endswith("| no |")


def test_a_run_with_failed_lm_calls_is_refused_and_says_which(benchmark_script):
    ct = benchmark_script("compile_threads")
    runs = [{"threads": 1, "lm_errors": 0}, {"threads": 2, "lm_errors": 6}]
    assert ct.failed_runs(runs) == ["--threads 2: 6 LM call(s) failed"]
    assert ct.failed_runs(runs[:1]) == []
