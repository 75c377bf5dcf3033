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
    PROGRAM_CONFIG_HELP,
    READER_HELP,
    add_index_args,
    add_lm_args,
    finite_seconds,
    lm_spec,
    make_console,
    program_config,
)
from ambiqa.errors import ConfigError


def _metric_names(text: str) -> list[str]:
    """``--metrics`` of ``ambiqa compare`` as canonical names, decided by the api's
    :func:`ambiqa.api.plan.metric_names` (``evaluate`` passes its flag to the api as typed)."""
    from ambiqa.api.plan import metric_names  # the api loads DSPy: not for --help

    names = [m.strip() for m in str(text).split(",") if m.strip()]
    if not names:
        raise ConfigError("--metrics is empty", hint="e.g. --metrics str-em,rouge-l,d-f1,dr")
    return metric_names(names, [])


#: how ``evaluate``'s flags spell the settings the api checks (its messages name the flag)
_SPELLED = {"threads": "--threads", "timeout_s": "--timeout-s",
            "max_error_rate": "--max-error-rate", "metrics": "--metrics"}


def evaluate_from_args(args: argparse.Namespace, *, lm: Any = None, retriever: Any = None,
                       progress: bool = True) -> tuple[dict[str, Any], Any]:
    """The work of ``ambiqa evaluate``: the flags as :class:`ambiqa.api.EvaluateSettings` and
    an :class:`ambiqa.api.LMSpec`, run by :func:`ambiqa.api.evaluate`, which checks and
    decides everything once (``benchmarks/compare_methods.py`` calls it too, so its runs carry
    exactly the RunSpec the CLI writes). ``lm`` / ``retriever`` replace the ones the
    arguments name (tests pass a scripted LM and an in-memory retriever)."""
    from ambiqa.api import EvaluateSettings, evaluate  # the api loads DSPy: not for --help

    # --metrics as a list, as typed: the api's plan checks and canonicalises it, once
    metrics = [m.strip() for m in str(args.metrics).split(",") if m.strip()] \
        if args.metrics else None
    if args.metrics and not metrics:
        raise ConfigError("--metrics is empty", hint="e.g. --metrics str-em,rouge-l,d-f1,dr")
    # the flags' LM, its model settled now (--lm, else $AMBIQA_LM, else "embedded"): the
    # label run.json records and the model the api builds are one decision; an LM object
    # passed in (tests) is labelled by --lm alone
    spec = lm_spec(args).resolved()
    settings = EvaluateSettings(
        metrics=metrics, out=args.out,
        resume=args.resume, retry_errors=args.retry_errors, threads=args.threads,
        timeout_s=args.timeout_s, max_error_rate=args.max_error_rate,
        reader=getattr(args, "reader", None), index=getattr(args, "index", None),
        index_root=getattr(args, "index_root", None),
        program_config=program_config(args) or None,
        lm_label=args.lm if lm is not None else spec.name,
        part=getattr(args, "part", None), progress=progress, spelled=_SPELLED)
    result = evaluate(args.target, args.data, settings,
                      lm=lm if lm is not None else spec, retriever=retriever)
    return result.summary, result.spec


def cmd_evaluate(args: argparse.Namespace) -> int:
    summary, spec = evaluate_from_args(args)
    console = make_console()
    console.print(f"[bold]{args.target}[/bold] on {args.data}: n={summary['n']}, "
                  f"errors={summary['n_errors']} (reader: {spec.reader})")
    _print_metrics(console, summary)
    console.print(f"  {cost_line(summary)}")
    cached = summary.get("cached") or {}
    if cached.get("examples"):
        from ambiqa.api.reports import cached_line

        console.print(f"  {cached_line(cached, summary['n'])}")
    console.print(f"  report: {Path(args.out) / 'report.md'}")
    if summary["n"] and summary["n_errors"] == summary["n"]:
        # nothing was answered (a dead endpoint, say): not a result, whatever the means say
        import sys

        from ambiqa.api.reports import first_error

        print(f"ambiqa: error: every one of the {summary['n']} examples failed (first: "
              f"{first_error(args.out)}); fix the cause and rerun with --resume "
              "--retry-errors", file=sys.stderr)
        return 1
    return 0


def cost_line(summary: dict[str, Any]) -> str:
    """Means per question, failed questions included: LM and retriever calls, prompt tokens
    the LM computed and those its prompt cache served, output tokens, wall seconds -- what a
    program costs beside what it scores. From ``cost_stats`` when the report wrote it, else
    the runner's ``cost`` (whose prompt tokens all count as computed)."""
    stats = summary.get("cost_stats") or {}
    cost = summary.get("cost") or {}

    def mean(key: str) -> float:
        if key in stats:
            return float(stats[key].get("mean", 0.0) or 0.0)
        return float(cost.get(key, 0.0) or 0.0)

    prompt = mean("input_tokens")
    computed = mean("computed_tokens") if "computed_tokens" in stats or \
        "computed_tokens" in cost else prompt
    return (f"cost/question: {mean('lm_calls'):.1f} LM calls, "
            f"{mean('retriever_calls'):.1f} retriever calls; tokens {computed:,.0f} computed "
            f"+ {max(prompt - computed, 0.0):,.0f} cached prompt, "
            f"{mean('output_tokens'):,.0f} output; {mean('wall_s'):.1f} s")


def _print_metrics(console: Any, summary: dict[str, Any]) -> None:
    """One line per metric: headline (failed = 0) with its interval, then the mean over
    the examples that did not fail, labelled."""
    from rich.markup import escape

    from ambiqa.api.reports import fmt_interval

    for name, m in summary["metrics"].items():
        mean = m["mean"]
        excl = m.get("mean_excl_failed", float("nan"))
        console.print(escape(
            f"  {name:10s} {mean:.4f}  95% CI {fmt_interval(*m['ci95'], digits=4)}  "
            f"n={m['n']} failed={m.get('failed', 0)} (failed count as 0; "
            f"excluding failures: {excl:.4f} on {m.get('n_scored', m['n'])})"))


def cmd_report(args: argparse.Namespace) -> int:
    from ambiqa.api.reports import report

    out = Path(args.out) if args.out else Path(args.run_dir)
    summary = report(args.run_dir, plots=not args.no_plots, out=args.out or None)
    console = make_console()
    console.print(f"{out / 'report.md'} (and report.html): n={summary['n']}, "
                  f"errors={summary['n_errors']}")
    _print_metrics(console, summary)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from ambiqa.api.reports import compare

    metrics = _metric_names(args.metrics) if args.metrics else None
    path = compare(args.runs, args.out, metrics=metrics, baseline=args.baseline,
                   quality_metric=args.metric, cost=args.cost,
                   allow_reader_mismatch=args.allow_reader_mismatch)
    console = make_console()
    console.print(path.read_text(encoding="utf-8"), markup=False)
    console.print(f"HTML: {path.with_suffix('.html')}", markup=False)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the evaluation sub-commands to the top-level parser."""
    p = sub.add_parser("evaluate", help="evaluate a program or artifact on a data split")
    p.add_argument("target", help="program name or artifact path")
    p.add_argument("--data", required=True,
                   help="e.g. asqa:dev:50, or your own questions: jsonl:PATH[:N] (one JSON "
                        "object per line: question plus answers or qa_pairs; see README)")
    p.add_argument("--metrics", default=None,
                   help="comma-separated (default: what the data's fields allow -- "
                        "str-em,rouge-l,d-f1,dr for ASQA-style sets, em,f1 for short answers)")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out (same program and split; N may grow)")
    p.add_argument("--retry-errors", action="store_true",
                   help="with --resume: rerun the examples recorded as failed")
    p.add_argument("--threads", type=int, default=1,
                   help="questions answered at once (default 1; 2 uses the embedded LM's 2 "
                        "slots)")
    p.add_argument("--timeout-s", type=finite_seconds, default=None,
                   help="per-example deadline in seconds; a late example is recorded as "
                        "failed (default: none)")
    p.add_argument("--max-error-rate", type=float, default=0.5,
                   help="stop when more than this share of examples failed (default 0.5)")
    p.add_argument("--reader", default=None,
                   help=READER_HELP)
    p.add_argument("--program-config", default=None, help=PROGRAM_CONFIG_HELP)
    p.add_argument("--part", default=None, metavar="I/N",
                   help="evaluate only the I-th of N contiguous slices of --data "
                        "(one per machine; join them with `ambiqa merge`)")
    add_index_args(p)
    add_lm_args(p)
    p.set_defaults(fn=cmd_evaluate)

    r = sub.add_parser("report", help="(re)render a run's summary.json, report.md, report.html "
                                      "and plots")
    r.add_argument("run_dir", help="a directory written by `ambiqa evaluate --out`")
    r.add_argument("--no-plots", action="store_true",
                   help="skip the PNG plots (matplotlib); the tables are written all the same")
    r.add_argument("--out", default=None,
                   help="write the report here instead of into the run directory (which is "
                        "only read)")
    r.set_defaults(fn=cmd_report)

    c = sub.add_parser("compare", help="compare runs side by side with paired differences")
    c.add_argument("runs", nargs="+", help="run directories (same data set and split)")
    c.add_argument("--out", required=True,
                   help="directory for compare.md, compare.html and the plots")
    c.add_argument("--metrics", default=None, help="default: the metrics all runs share")
    c.add_argument("--baseline", type=int, default=0,
                   help="index of the run the others are compared to (default 0)")
    c.add_argument("--allow-reader-mismatch", action="store_true",
                   help="pair runs whose D-F1/DR were scored by different readers (the "
                        "differences then mix the method with the reader)")
    c.add_argument("--metric", "--quality-metric", dest="metric", default=None,
                   help="quality axis of the quality-vs-cost plot, listed first in the forest "
                        "plot (default: the data set's main metric, DR on ASQA, F1 on "
                        "short-answer sets)")
    c.add_argument("--cost", default="calls", metavar="{calls,tokens,seconds}",
                   help="cost axis: LM calls, computed tokens (prompt tokens not served from "
                        "the prompt cache + generated tokens) or wall seconds per question "
                        "(default: calls)")
    c.set_defaults(fn=cmd_compare)
