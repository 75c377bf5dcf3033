"""benchmarks.verifier_signal's statistics: Diva's path rule and the paired summary (no LM)."""

from __future__ import annotations

from benchmarks.verifier_signal import path_of, summarize


def test_path_rule_matches_diva() -> None:
    assert path_of([False, False]) == "closed_book"
    assert path_of([False, None]) == "closed_book"
    assert path_of([None, None]) == "rag"  # Unverified keeps the passages
    assert path_of([False, True]) == "rag"


def _row(variant: str, qid: str, i: int, expected: str, vote: bool | None) -> dict:
    return {"variant": variant, "key": f"{qid}#{i}", "qid": qid, "q_index": int(qid),
            "interpretation": "q", "expected": expected, "vote": vote, "seconds": 1.0,
            "lm_calls": 1}


def test_summary_pairs_only_complete_questions() -> None:
    rows = [_row("zero_shot", "0", 0, "no", True), _row("zero_shot", "0", 1, "no", True),
            _row("signal", "0", 0, "no", False), _row("signal", "0", 1, "no", False),
            _row("zero_shot", "1", 0, "yes", True), _row("signal", "1", 0, "yes", True),
            _row("zero_shot", "2", 0, "yes", True)]  # question 2: signal not run yet
    s = summarize(rows, {"items_per_q": {"0": 2, "1": 1, "2": 1}})
    assert s["questions"] == 2
    assert s["variants"]["zero_shot"]["path_accuracy"] == 0.5
    assert s["variants"]["signal"]["path_accuracy"] == 1.0
    assert s["variants"]["signal"]["paths"] == {"rag": 1, "closed_book": 1}
    assert s["path_diff"]["diff"] == 0.5 and s["path_diff"]["n"] == 2
