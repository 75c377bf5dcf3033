"""Commands for work that outgrows one process: ``merge`` (parts of one evaluation).

``ambiqa evaluate ... --part I/N`` runs one slice per machine; ``ambiqa merge`` joins the
slices into one run directory (:mod:`ambiqa.evaluation.reports.merge`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ambiqa.cli.common import make_console


def cmd_merge(args: argparse.Namespace) -> int:
    from ambiqa.evaluation.reports.merge import merge_runs

    summary = merge_runs(args.runs, Path(args.out), allow_unfinished=args.allow_unfinished,
                         plots=not args.no_plots)
    console = make_console()
    console.print(f"merged {len(args.runs)} part(s) into {args.out}: n={summary['n']}, "
                  f"errors={summary['n_errors']}")
    for name, m in summary["metrics"].items():
        console.print(f"  {name:10s} {m['mean']:.4f}  n={m['n']}", markup=False)
    console.print(f"  report: {Path(args.out) / 'report.md'}", markup=False)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``merge`` to the top-level parser."""
    m = sub.add_parser("merge", help="join the parts of an evaluation run with --part I/N")
    m.add_argument("runs", nargs="+", help="the run directories of parts 1/N .. N/N")
    m.add_argument("--out", required=True, help="new run directory for the merged run")
    m.add_argument("--allow-unfinished", action="store_true",
                   help="merge parts that still miss rows (the summary then covers fewer "
                        "questions than the data spec)")
    m.add_argument("--no-plots", action="store_true",
                   help="skip the PNG plots of the merged report (the tables are written)")
    m.set_defaults(fn=cmd_merge)
