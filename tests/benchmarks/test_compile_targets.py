"""benchmarks/compile_targets.py on stored runs: the targets are judged from their intervals."""

from __future__ import annotations

import math

RESCORED = "benchmarks/results/evidence-rescored"


def test_targets_of_the_stored_bootstrap_diva_run(benchmark_script):
    ct = benchmark_script("compile_targets")
    m = ct.measure(f"{RESCORED}/asqa-compiled/diva-bootstrap", ct.ZERO_SHOT, ct.BEST_VANILLA,
                   "benchmarks/results/evidence/compiled/diva-bootstrap.json")
    verdict = {t["target"].split(" ")[0]: t["verdict"] for t in m["targets"]}
    # DR: n = 40 < 60 and the interval holds 0; STR-EM: the interval holds 0 (no longer "met");
    # 14-word answers, the whole interval under 40; the verifier never said no (one path only)
    assert verdict == {"DR": "undecided at n = 40", "STR-EM": "undecided at n = 40",
                       "median": "missed", "verifier": "missed"}
    assert [t["met"] for t in m["targets"]] == [False] * 4
    assert m["median_words"]["compiled"] == 14
    assert m["median_words"]["writer_demos"] == [30, 77]  # shown longer answers than it wrote
    assert m["signal"]["compiled"]["verify.path"]["predicted"] == {"rag": 40}
    # every gold reading of the 40 shared questions is stated or lost at exactly one step
    assert sum(m["loss_steps"]["compiled"].values()) == sum(m["loss_steps"]["zero_shot"].values())
    text = ct.render(m, "cmd")
    assert "| verifier path accuracy >= 0.8, both paths taken |" in text
    assert "| target | measured | verdict |" in text and "| met |" not in text


def test_judge_decides_only_on_the_whole_interval(benchmark_script):
    judge = benchmark_script("compile_targets").judge
    # "above 0" (strict), n >= 60 asked for
    assert judge(0.01, 0.2, 60, low=0.0, strict=True, min_n=60) == "met"
    assert judge(0.01, 0.2, 15, low=0.0, strict=True, min_n=60) == "undecided at n = 15"
    assert judge(-0.1, -0.01, 15, low=0.0, strict=True, min_n=60) == "missed"
    assert judge(-0.2, 0.0, 60, low=0.0, strict=True) == "missed"  # 0 is not above 0
    # "not lowered" (at or above 0): the STR-EM -0.154 [-0.351, 0.039] at n = 15
    assert judge(-0.351, 0.039, 15, low=0.0) == "undecided at n = 15"
    assert judge(0.0, 0.1, 15, low=0.0) == "met"
    # a range (median words 40-100)
    assert judge(45, 60, 60, low=40, high=100) == "met"
    assert judge(10, 11, 60, low=40, high=100) == "missed"
    assert judge(101, 120, 60, low=40, high=100) == "missed"
    assert judge(30, 50, 60, low=40, high=100) == "undecided at n = 60"
    assert judge(math.nan, math.nan, 2, low=0.0) == "undecided at n = 2"


def test_point_targets_with_a_count_get_an_interval(benchmark_script):
    ct = benchmark_script("compile_targets")
    lo, hi = ct.wilson(12, 15)  # the verifier's 12/15 that the old table called "met"
    assert (round(lo, 3), round(hi, 3)) == (0.548, 0.930)
    assert ct.judge(lo, hi, 15, low=0.8, high=1.0) == "undecided at n = 15"
    assert ct.judge(*ct.wilson(58, 60), 60, low=0.8, high=1.0) == "met"
    assert ct.judge(*ct.wilson(30, 60), 60, low=0.8, high=1.0) == "missed"
    assert ct.wilson(0, 0)[0] != ct.wilson(0, 0)[0]  # NaN: no interval for n = 0
    lo, hi = ct.median_interval([10] * 30 + [11] * 30)
    assert 10 <= lo <= hi <= 11
    assert all(math.isnan(x) for x in ct.median_interval([1, 2]))
