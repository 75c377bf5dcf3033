"""benchmarks/signature_budget.py on a fabricated run directory (no LM call)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import signature_budget as sb


def _run(dir_: Path, program: str, by_signature: list[dict[str, dict[str, int]]]) -> Path:
    dir_.mkdir(parents=True)
    (dir_ / "run.json").write_text(json.dumps({"program": program}), encoding="utf-8")
    rows = [{"id": str(i), "cost": {"by_signature": s}} for i, s in enumerate(by_signature)]
    (dir_ / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                        encoding="utf-8")
    return dir_


def test_rates_intervals_and_targets_come_from_the_rows(tmp_path: Path) -> None:
    # 40 questions: the writer called once each, 10 cut at the cap; the verifier twice per
    # question, one failed parse on the first question (DSPy called a third time)
    rows = []
    for i in range(40):
        verify = {"calls": 3 if i == 0 else 2, "output_tokens": 90 if i == 0 else 60,
                  "truncated": 0, "parse_failures": 1 if i == 0 else 0}
        if i == 1:
            verify["max_output_tokens"] = 55
        rows.append({"WriteLongAnswer": {"calls": 1, "output_tokens": 256 if i < 10 else 100,
                                         "truncated": int(i < 10), "parse_failures": 0},
                     "VerifyRetrieval": verify})
    run = _run(tmp_path / "runs" / "diva", "diva", rows)
    report = sb.build([run])
    entries = {e["signature"]: e for e in report["runs"][0]["signatures"]}

    writer = entries["WriteLongAnswer"]
    assert writer["calls"] == 40 and writer["truncated"] == 10
    assert writer["truncation_target"] == "missed"  # 25%: the interval is above 2%
    assert writer["parse_target"] == "undecided at n = 40"  # 100% of 40 cannot prove >= 95%
    assert writer["output_longest"] == 256 and writer["longest_exact"]
    assert writer["cap"] == 256  # WriteLongAnswer's output_cap_tokens, below Diva's 300

    verify = entries["VerifyRetrieval"]
    assert verify["calls"] == 81 and verify["first_try_calls"] == 80
    assert verify["first_try_parse"] == 79 / 80
    # the longest is a per-question mean where the rows predate max_output_tokens
    assert verify["output_longest"] == 55 and verify["longest_exact"]
    assert "~" not in sb.render(report).split("VerifyRetrieval")[1].split("\n")[0]


def test_a_mean_over_several_calls_is_marked_as_a_lower_bound(tmp_path: Path) -> None:
    rows = [{"VerifyRetrieval": {"calls": 2, "output_tokens": 200, "truncated": 0,
                                 "parse_failures": 0}}]
    report = sb.build([_run(tmp_path / "r", "diva", rows)])
    entry = report["runs"][0]["signatures"][0]
    assert entry["output_longest"] == 100 and not entry["longest_exact"]
    assert "/ ~100 |" in sb.render(report)


def test_met_and_missed_only_when_the_interval_decides() -> None:
    assert sb.verdict(0.96, 0.99, 0.95, at_least=True, n=500) == "met"
    assert sb.verdict(0.80, 0.90, 0.95, at_least=True, n=60) == "missed"
    assert sb.verdict(0.90, 0.99, 0.95, at_least=True, n=60) == "undecided at n = 60"
    assert sb.verdict(0.0, 0.015, 0.02, at_least=False, n=300) == "met"
    assert sb.verdict(0.0, 0.06, 0.02, at_least=False, n=60) == "undecided at n = 60"


def test_a_missing_run_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    assert sb.main([str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 2
    assert "no results.jsonl in" in capsys.readouterr().err



def test_long_answers_that_loop_are_counted_per_run(tmp_path: Path) -> None:
    from benchmarks.signature_budget import build

    run = tmp_path / "r"
    run.mkdir()
    rows = [{"id": "1", "prediction": {"answer": "The long answer is: " * 6}, "cost": {}},
            {"id": "2", "prediction": {"answer": "Italy won in 2006. France lost."}, "cost": {}}]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "run.json").write_text(json.dumps({"program": "diva"}))
    assert build([run])["runs"][0]["looping"] == 1
