"""benchmarks/loop_replay.py: what the loop guard changed between an unguarded and a guarded
replay of the same questions."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import loop_replay

LOOP = "Ann won. The cup went to Ann in 2001. The cup went to Ann in 2001. The cup went to Ann"


def _run(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def _row(qid: str, answer: str, *, lm: int = 6, cached: int = 6, loops: int = 0,
         writer_out: int = 0) -> dict:
    return {"id": qid, "question": f"q{qid}?", "prediction": {"answer": answer},
            "cost": {"lm_calls": lm, "cached_calls": cached, "loops_cut": loops,
                     "by_signature": {"WriteLongAnswer": {"output_tokens": writer_out}}}}


def test_summary_counts_cut_answers_live_calls_and_estimates_tokens_not_decoded(tmp_path):
    off = _run(tmp_path, "off", [_row("1", LOOP), _row("2", "Bo won.", lm=7, cached=6),
                                 _row("3", "Cy won.")])
    on = _run(tmp_path, "on", [_row("1", "Ann won. The cup went to Ann in 2001.", loops=1),
                               _row("2", "Bo won."), _row("3", "Cy won the cup.")])
    stored = _run(tmp_path, "stored", [_row("1", LOOP, writer_out=100)])
    s = loop_replay.summarize(off, on, stored)
    assert s["questions"] == 3 and s["answers_changed"] == 2
    assert s["answers_cut_as_prefix"] == 1  # question 3 changed upstream, not by a cut
    assert s["loops_cut_on"] == 1
    assert (s["live_calls_off"], s["questions_with_live_calls_off"]) == (1, 1)
    cut_share = 1 - len("Ann won. The cup went to Ann in 2001.") / len(LOOP)
    assert s["writer_tokens_not_decoded_est"] == round(100 * cut_share)
    md = loop_replay.render(s, "cmd")
    assert "answers changed by the guard: 2 of 3" in md
    assert "(not a prefix: an earlier step changed)" in md


def test_main_writes_both_files(tmp_path):
    off = _run(tmp_path, "off", [_row("1", LOOP)])
    on = _run(tmp_path, "on", [_row("1", "Ann won.", loops=1)])
    out = tmp_path / "out"
    assert loop_replay.main(["summary", str(off), str(on), "--out", str(out)]) == 0
    assert json.loads((out / "loop_replay.json").read_text())["answers_changed"] == 1
    assert (out / "loop_replay.md").read_text().startswith("# Loop guard")
