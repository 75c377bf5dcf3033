"""Evaluation commands: ``evaluate``, ``report`` and ``compare``.

``evaluate`` checks everything that needs no model first (metric names, program name, data
spec, the run directory and whether it may be resumed into) so a typo costs a second, not an
LM load, and never touches results already written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ambiqa.cli.common import (
    READER_HELP,
    add_index_args,
    add_lm_args,
    lm_from_args,
    make_console,
    metric_fns,
    program_config,
    program_or_artifact,
    reader_from_args,
)
from ambiqa.errors import ConfigError


def _metric_names(text: str) -> list[str]:
    from ambiqa.evaluation.registry import canonical_name, get_metric, with_set_parts

    names = [m.strip() for m in str(text).split(",") if m.strip()]
    if not names:
        raise ConfigError("--metrics is empty", hint="e.g. --metrics str-em,rouge-l,d-f1,dr")
    for name in names:
        get_metric(name)  # unknown names fail here, naming the closest one
    out = [canonical_name(n) for n in names]  # one spelling per metric in results.jsonl
    return with_set_parts(out)


def _fingerprint(program: Any) -> str | None:
    """The program's retriever fingerprint (None for programs without a retriever)."""
    fp = getattr(getattr(program, "retriever", None), "fingerprint", None)
    return str(fp) if isinstance(fp, str) and fp else None


def _artifact_sha256(target: str) -> str | None:
    """The sha256 of an artifact target (None for a program name), so a resume can prove it
    continues with the same compiled program."""
    import hashlib

    if not _is_artifact(target):
        return None
    path = Path(target)
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ConfigError(f"cannot read artifact {path}: {exc.strerror or exc}") from exc


def _is_artifact(target: str) -> bool:
    return target.endswith(".json") or Path(target).is_file()


def evaluate_from_args(args: argparse.Namespace, *, lm: Any = None, retriever: Any = None,
                       progress: bool = True) -> tuple[dict[str, Any], Any]:
    """The work of ``ambiqa evaluate``; ``benchmarks/compare_methods.py`` calls it too, so
    its runs carry exactly the RunSpec the CLI writes. ``lm`` / ``retriever`` replace the
    ones the arguments name (tests pass a scripted LM and an in-memory retriever)."""
    from ambiqa.data import load_dataset
    from ambiqa.evaluation.merge import part_of
    from ambiqa.evaluation.registry import judge_name
    from ambiqa.evaluation.runner import (
        RunSpec,
        check_run_dir,
        ensure_writable_dir,
        evaluate,
    )
    from ambiqa.lm import configure
    from ambiqa.programs.registry import build_program, program_class

    if args.threads < 1:
        raise ConfigError(f"--threads must be at least 1, got {args.threads}")
    if args.timeout_s is not None and args.timeout_s <= 0:
        raise ConfigError(f"--timeout-s must be positive, got {args.timeout_s}")
    if not 0.0 <= args.max_error_rate <= 1.0:
        raise ConfigError(f"--max-error-rate must be within [0, 1], got {args.max_error_rate}")
    names = _metric_names(args.metrics)
    if not _is_artifact(args.target):
        program_class(args.target)  # a typo fails here, with the nearest name
    config = program_config(args)
    examples, part = part_of(load_dataset(args.data), getattr(args, "part", None))
    out = Path(args.out)
    artifact_sha = _artifact_sha256(args.target)
    index = getattr(args, "index", None)
    # the settings known before any model loads are checked now; reader and judge below
    draft = RunSpec(program=args.target, data=args.data, metrics=names, lm=args.lm,
                    index=index, program_config=config or None,
                    artifact_sha256=artifact_sha, extra=part)
    check_run_dir(out, draft, args.resume,
                  skip=frozenset({"reader", "judge", "index_fingerprint"}))
    ensure_writable_dir(out)
    if lm is None:
        lm_from_args(args)
    else:
        configure(lm)
    reader = reader_from_args(args)
    metrics = metric_fns(names, reader)
    if retriever is not None and _is_artifact(args.target):
        from ambiqa.optimizers.artifact import load_artifact

        program = load_artifact(args.target, retriever=retriever)
    elif retriever is not None:
        program = build_program(args.target, retriever=retriever, **config)
    else:
        program = program_or_artifact(args, args.target)
    spec = RunSpec(program=args.target, data=args.data, metrics=names,
                   reader=getattr(reader, "name", None), lm=args.lm,
                   index=index, program_config=config or None,
                   judge=judge_name(names), artifact_sha256=artifact_sha,
                   index_fingerprint=_fingerprint(program), extra=part)
    summary = evaluate(program, examples, metrics, out_dir=out, spec=spec,
                       resume=args.resume, threads=args.threads,
                       max_error_rate=args.max_error_rate, timeout_s=args.timeout_s,
                       retry_errors=args.retry_errors, progress=progress)
    return summary, spec


def cmd_evaluate(args: argparse.Namespace) -> int:
    summary, spec = evaluate_from_args(args)
    console = make_console()
    console.print(f"[bold]{args.target}[/bold] on {args.data}: n={summary['n']}, "
                  f"errors={summary['n_errors']} (reader: {spec.reader})")
    _print_metrics(console, summary)
    console.print(f"  cost/question: {summary['cost']}")
    console.print(f"  report: {Path(args.out) / 'report.md'}")
    if summary["n"] and summary["n_errors"] == summary["n"]:
        # nothing was answered (a dead endpoint, say): not a result, whatever the means say
        import sys

        print(f"ambiqa: error: every one of the {summary['n']} examples failed (first: "
              f"{_first_error(args.out)}); fix the cause and rerun with --resume "
              "--retry-errors", file=sys.stderr)
        return 1
    return 0


def _first_error(out: str) -> str:
    from ambiqa.evaluation.run_dir import ResultsFile

    for row in ResultsFile(Path(out) / "results.jsonl").read():
        if row.get("error"):
            return str(row["error"]).splitlines()[0][:200]
    return "unknown"


def _print_metrics(console: Any, summary: dict[str, Any]) -> None:
    """One line per metric: headline (failed = 0) with its interval, then the mean over
    the examples that did not fail, labelled."""
    from rich.markup import escape

    from ambiqa.evaluation.stats import fmt_interval

    for name, m in summary["metrics"].items():
        mean = m["mean"]
        excl = m.get("mean_excl_failed", float("nan"))
        console.print(escape(
            f"  {name:10s} {mean:.4f}  95% CI {fmt_interval(*m['ci95'], digits=4)}  "
            f"n={m['n']} failed={m.get('failed', 0)} (failed count as 0; "
            f"excluding failures: {excl:.4f} on {m.get('n_scored', m['n'])})"))


def cmd_report(args: argparse.Namespace) -> int:
    from ambiqa.evaluation.report import write_run_report

    summary = write_run_report(Path(args.run_dir), plots=not args.no_plots)
    console = make_console()
    console.print(f"{Path(args.run_dir) / 'report.md'}: n={summary['n']}, "
                  f"errors={summary['n_errors']}")
    _print_metrics(console, summary)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from ambiqa.evaluation.compare import compare_runs, write_comparison

    metrics = _metric_names(args.metrics) if args.metrics else None
    result = compare_runs(args.runs, metrics=metrics, baseline=args.baseline,
                          allow_reader_mismatch=args.allow_reader_mismatch)
    path = write_comparison(result, Path(args.out), quality_metric=args.quality_metric)
    console = make_console()
    console.print(path.read_text(encoding="utf-8"), markup=False)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the evaluation sub-commands to the top-level parser."""
    p = sub.add_parser("evaluate", help="evaluate a program or artifact on a data split")
    p.add_argument("target", help="program name or artifact path")
    p.add_argument("--data", required=True, help="e.g. asqa:dev:50")
    p.add_argument("--metrics", default="str-em,rouge-l,d-f1,dr")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out (same program and split; N may grow)")
    p.add_argument("--retry-errors", action="store_true",
                   help="with --resume: rerun the examples recorded as failed")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--timeout-s", type=float, default=None,
                   help="per-example deadline in seconds; a late example is recorded as "
                        "failed (default: none)")
    p.add_argument("--max-error-rate", type=float, default=0.5,
                   help="stop when more than this share of examples failed (default 0.5)")
    p.add_argument("--reader", default=None,
                   help=READER_HELP)
    p.add_argument("--program-config", default=None)
    p.add_argument("--part", default=None, metavar="I/N",
                   help="evaluate only the I-th of N contiguous slices of --data "
                        "(one per machine; join them with `ambiqa merge`)")
    add_index_args(p)
    add_lm_args(p)
    p.set_defaults(fn=cmd_evaluate)

    r = sub.add_parser("report", help="(re)render a run's summary.json, report.md and plots")
    r.add_argument("run_dir", help="a directory written by `ambiqa evaluate --out`")
    r.add_argument("--no-plots", action="store_true")
    r.set_defaults(fn=cmd_report)

    c = sub.add_parser("compare", help="compare runs side by side with paired differences")
    c.add_argument("runs", nargs="+", help="run directories (same data set and split)")
    c.add_argument("--out", required=True, help="directory for compare.md and the plot")
    c.add_argument("--metrics", default=None, help="default: the metrics all runs share")
    c.add_argument("--baseline", type=int, default=0,
                   help="index of the run the others are compared to (default 0)")
    c.add_argument("--allow-reader-mismatch", action="store_true",
                   help="pair runs whose D-F1/DR were scored by different readers (the "
                        "differences then mix the method with the reader)")
    c.add_argument("--quality-metric", default=None,
                   help="metric on the quality-vs-cost plot (default: the first)")
    c.set_defaults(fn=cmd_compare)
