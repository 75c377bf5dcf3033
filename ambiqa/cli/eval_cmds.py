"""Evaluation commands: ``evaluate``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ambiqa.cli.common import (
    add_index_args,
    add_lm_args,
    lm_from_args,
    make_console,
    metric_fns,
    program_or_artifact,
    reader_from_args,
)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ambiqa.data import load_dataset
    from ambiqa.evaluation.runner import RunSpec, evaluate

    examples = load_dataset(args.data)
    program = program_or_artifact(args, args.target)
    lm_from_args(args)
    names = [m.strip() for m in args.metrics.split(",") if m.strip()]
    reader = reader_from_args(args)
    metrics = metric_fns(names, reader)
    spec = RunSpec(program=args.target, data=args.data, metrics=names,
                   reader=getattr(reader, "name", None), lm=args.lm)
    summary = evaluate(program, examples, metrics, out_dir=Path(args.out), spec=spec,
                       resume=args.resume, threads=args.threads)
    console = make_console()
    console.print(f"[bold]{args.target}[/bold] on {args.data}: n={summary['n']}, "
                  f"errors={summary['n_errors']} (reader: {spec.reader})")
    for name, m in summary["metrics"].items():
        console.print(f"  {name:10s} {m['mean']:.4f}  95% CI \\[{m['ci95'][0]:.4f}, "
                      f"{m['ci95'][1]:.4f}]")
    console.print(f"  cost/question: {summary['cost']}")
    return 0



def register(sub: argparse._SubParsersAction) -> None:
    """Add the evaluation sub-commands to the top-level parser."""
    p = sub.add_parser("evaluate", help="evaluate a program or artifact on a data split")
    p.add_argument("target", help="program name or artifact path")
    p.add_argument("--data", required=True, help="e.g. asqa:dev:50")
    p.add_argument("--metrics", default="str-em,rouge-l,d-f1,dr")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reader", default=None)
    p.add_argument("--program-config", default=None)
    add_index_args(p)
    add_lm_args(p)
    p.set_defaults(fn=cmd_evaluate)
