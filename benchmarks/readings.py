"""How many readings a program named per question, and how many only restate it (issue 46).

Reads stored evaluation runs (no LM call): for each run, over the questions every given run
answered without an error (paired), the readings per question (the prediction's
``interpretations``), the questions with one reading or none, and the readings whose question
adds no word to the asked one (:func:`ambiqa.optimizers.signals.restates`: it specifies
nothing). With ``--data SPLIT`` (the split the runs' questions come from, e.g. ``asqa:dev``)
also the mean share of each question's gold qa pairs whose answer one of the readings gives
(:func:`ambiqa.optimizers.signals.coverage`): readings found *and right*. Says whether a
compile's gain came with more readings found.

    python -m benchmarks.readings benchmarks/results/compile-v4/runs/diva-zeroshot \\
        benchmarks/results/compile-v5/runs/diva-clarify-signal --data asqa:dev
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from ambiqa.evaluation.stats import fmt_interval, paired_comparison
from ambiqa.optimizers.signals import coverage, restates
from benchmarks.stored_runs import ROOT, rel


def answered(run: Path) -> dict[str, dict[str, Any]]:
    """The run's rows without an error, by question id."""
    rows = {}
    for line in (run / "results.jsonl").read_text("utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if not row.get("error"):
                rows[str(row["id"])] = row
    return rows


def count(rows: dict[str, dict[str, Any]], ids: list[str],
          gold: dict[str, Any] | None = None) -> dict[str, Any]:
    """Readings per question over ``ids`` (see the module docstring); ``gold``: examples by
    id, for the gold-pair coverage (None: not computed)."""
    per_q, restating, covered = [], 0, []
    for qid in ids:
        readings = (rows[qid].get("prediction") or {}).get("interpretations") or []
        per_q.append(len(readings))
        restating += sum(restates(str(r.get("question", "")), rows[qid]["question"])
                         for r in readings)
        if gold is not None:
            covered.append({"id": qid, "metrics": {"covered": coverage(readings, gold[qid])}})
    return {"questions": len(ids), "readings_mean": statistics.mean(per_q) if per_q else 0.0,
            "one_or_none": sum(n <= 1 for n in per_q), "readings": sum(per_q),
            "restating": restating,
            "gold_covered": (statistics.mean(r["metrics"]["covered"] for r in covered)
                             if covered else None), "covered_rows": covered}


def measure(runs: list[Path], gold: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    loaded = [answered(r) for r in runs]
    ids = sorted(set.intersection(*(set(rows) for rows in loaded))) if loaded else []
    if gold is not None:
        missing = [qid for qid in ids if qid not in gold]
        if missing:
            raise SystemExit(f"readings: {len(missing)} question id(s) not in --data "
                             f"(first {missing[0]}): name the split the runs answered")
    table = [{"run": rel(run, ROOT), **count(rows, ids, gold)}
             for run, rows in zip(runs, loaded, strict=True)]
    for r in table[1:]:  # each run against the first, paired on the same questions
        if gold is not None and ids:
            p = paired_comparison(table[0]["covered_rows"], r["covered_rows"], "covered")
            r["covered_delta"] = (p["diff"], *p["ci95"])
    return table


def render(table: list[dict[str, Any]], command: str) -> str:
    gold = any(r.get("gold_covered") is not None for r in table)
    out = [f"`{command}`", "",
           "| run | paired questions | readings / question | one reading or none "
           "| readings that only restate the question |"
           + (" gold pairs a reading answers (mean) | Δ vs the first run [95%] |"
              if gold else ""),
           "|---|---:|---:|---:|---:|" + ("---:|---|" if gold else "")]
    for r in table:
        delta = r.get("covered_delta")
        out.append(f"| {r['run']} | {r['questions']} | {r['readings_mean']:.2f} | "
                   f"{r['one_or_none']} | {r['restating']} of {r['readings']} |"
                   + (f" {r['gold_covered']:.3f} | "
                      + (f"{delta[0]:+.3f} {fmt_interval(delta[1], delta[2])} (n = "
                         f"{r['questions']}) |" if delta else "— |") if gold else ""))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories (results.jsonl)")
    ap.add_argument("--data", default=None,
                    help="the split the runs' questions come from (e.g. asqa:dev), for the "
                         "share of gold qa pairs the readings answer")
    args = ap.parse_args(argv)
    missing = [str(r) for r in args.runs if not (r / "results.jsonl").is_file()]
    if missing:
        raise SystemExit(f"readings: no results.jsonl in {', '.join(missing)}")
    gold = None
    if args.data:
        from ambiqa.data import load_dataset

        gold = {str(ex.id): ex for ex in load_dataset(args.data)}
    command = ("python -m benchmarks.readings " + " ".join(rel(r, ROOT) for r in args.runs)
               + (f" --data {args.data}" if args.data else ""))
    print(render(measure(args.runs, gold), command), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
