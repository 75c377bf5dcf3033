"""How many readings a program named per question, and how many only restate it (issue 46).

Reads stored evaluation runs (no LM call): for each run, over the questions every given run
answered without an error (paired), the readings per question (the prediction's
``interpretations``), the questions with one reading or none, and the readings whose question
adds no word to the asked one (:func:`ambiqa.optimizers.signals.restates`: it specifies
nothing). Says whether a compile's gain came with more readings found.

    python -m benchmarks.readings benchmarks/results/compile-v4/runs/diva-zeroshot \\
        benchmarks/results/compile-v5/runs/diva-clarify-signal
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from ambiqa.optimizers.signals import restates
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


def count(rows: dict[str, dict[str, Any]], ids: list[str]) -> dict[str, Any]:
    """Readings per question over ``ids`` (see the module docstring)."""
    per_q, restating = [], 0
    for qid in ids:
        readings = (rows[qid].get("prediction") or {}).get("interpretations") or []
        per_q.append(len(readings))
        restating += sum(restates(str(r.get("question", "")), rows[qid]["question"])
                         for r in readings)
    return {"questions": len(ids), "readings_mean": statistics.mean(per_q) if per_q else 0.0,
            "one_or_none": sum(n <= 1 for n in per_q), "readings": sum(per_q),
            "restating": restating}


def measure(runs: list[Path]) -> list[dict[str, Any]]:
    loaded = [answered(r) for r in runs]
    ids = sorted(set.intersection(*(set(rows) for rows in loaded))) if loaded else []
    return [{"run": rel(run, ROOT), **count(rows, ids)}
            for run, rows in zip(runs, loaded, strict=True)]


def render(table: list[dict[str, Any]], command: str) -> str:
    out = [f"`{command}`", "",
           "| run | paired questions | readings / question | one reading or none "
           "| readings that only restate the question |", "|---|---:|---:|---:|---:|"]
    for r in table:
        out.append(f"| {r['run']} | {r['questions']} | {r['readings_mean']:.2f} | "
                   f"{r['one_or_none']} | {r['restating']} of {r['readings']} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories (results.jsonl)")
    args = ap.parse_args(argv)
    missing = [str(r) for r in args.runs if not (r / "results.jsonl").is_file()]
    if missing:
        raise SystemExit(f"readings: no results.jsonl in {', '.join(missing)}")
    command = "python -m benchmarks.readings " + " ".join(rel(r, ROOT) for r in args.runs)
    print(render(measure(args.runs), command), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
