"""Optimization commands: ``compile`` and ``export``."""

from __future__ import annotations

import argparse
import datetime as _dt
from pathlib import Path
from typing import Any

from ambiqa.cli.common import (
    add_index_args,
    add_lm_args,
    lm_from_args,
    make_console,
    metric_fns,
    program_config,
    reader_from_args,
    retriever_from_args,
)
from ambiqa.errors import ConfigError


def compile_and_save(program_name: str, train_spec: str, dev_spec: str | None, metric: str,
             optimizer: str, k: int, seed: int, retriever: Any, lm: Any, reader: Any,
             out: Path, config: dict[str, Any], threshold: float | None,
             console: Any) -> tuple[Any, dict[str, Any]]:
    """Compile, score on dev, save: shared by ``compile`` and ``demo``."""
    import dspy

    import ambiqa
    from ambiqa.data import is_training_split, load_dataset
    from ambiqa.evaluation.registry import dspy_metric
    from ambiqa.evaluation.runner import evaluate
    from ambiqa.lm import lm_id
    from ambiqa.optimizers.artifact import save_artifact
    from ambiqa.optimizers.compile import compile_program
    from ambiqa.programs.registry import build_program
    from ambiqa.retrieval.factory import describe

    if not is_training_split(train_spec):
        raise ConfigError(f"{train_spec!r} is not a training split; compiling on it would leak "
                          "evaluation data", hint="use e.g. asqa:train or demo:train")
    program = build_program(program_name, retriever=retriever, **config)
    trainset = load_dataset(train_spec)
    console.print(f"compiling [bold]{program_name}[/bold] with {optimizer} on {train_spec} "
                  f"({len(trainset)} examples), metric {metric}")
    compiled, report = compile_program(program, trainset, optimizer=optimizer,
                                       metric=dspy_metric(metric, reader=reader), k=k,
                                       seed=seed, threshold=threshold)
    scores: dict[str, Any] = {}
    if dev_spec:
        devset = load_dataset(dev_spec)
        console.print(f"scoring on {dev_spec} ({len(devset)} examples)")
        summary = evaluate(compiled, devset, metric_fns([metric], reader), progress=False)
        scores["dev"] = summary["metrics"][metric]["mean"]
        scores["dev_n"] = summary["n"]
    manifest = {
        "program": program_name,
        "program_config": program.config(),
        "ambiqa_version": ambiqa.__version__,
        "dspy_version": dspy.__version__,
        "lm": lm_id(lm),
        "retriever": describe(retriever),
        "metric": metric,
        "reader": getattr(reader, "name", None),
        "train": train_spec,
        "dev": dev_spec,
        "scores": scores,
        "optimizer": {"name": optimizer, **report.settings},
        "demos_per_predictor": report.demos_per_predictor,
        "compile_cost": report.cost,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    save_artifact(out, compiled, manifest)
    console.print(f"wrote [bold]{out}[/bold]: demos per predictor "
                  f"{report.demos_per_predictor}, dev {metric} = "
                  f"{scores.get('dev', float('nan')):.3f}, {report.cost['lm_calls']} LM calls")
    return compiled, manifest


def cmd_compile(args: argparse.Namespace) -> int:
    from ambiqa.data import is_training_split, parse_spec
    from ambiqa.programs.registry import program_class

    cls = program_class(args.program)
    for spec in filter(None, [args.train, args.dev]):
        parse_spec(spec)  # a bad spec fails here, before any model is loaded
    if not is_training_split(args.train):
        raise ConfigError(f"{args.train!r} is not a training split; compiling on it would leak "
                          "evaluation data", hint="use e.g. asqa:train or demo:train")
    retriever = retriever_from_args(args, needed=cls.needs_retriever)
    lm = lm_from_args(args)
    out = Path(args.out or f"artifacts/{args.program}.json")
    compile_and_save(args.program, args.train, args.dev, args.metric, args.optimizer, args.k,
                     args.seed, retriever, lm, reader_from_args(args), out,
                     program_config(args), args.threshold, make_console())
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ambiqa.optimizers.artifact import read_artifact
    from ambiqa.optimizers.export import export_prompts, render

    doc = read_artifact(args.artifact)
    program = load_for_export(args.artifact)
    text = render(export_prompts(program), args.format, manifest=doc["manifest"])
    if args.out:
        from ambiqa.fsutil import atomic_write_text

        atomic_write_text(Path(args.out), text)
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


def load_for_export(path: str) -> Any:
    """Export needs the predictors, not the index: build the program without a retriever."""
    from ambiqa.optimizers.artifact import load_program_state, read_artifact
    from ambiqa.programs.registry import build_program

    doc = read_artifact(path)
    m = doc["manifest"]
    program = build_program(m["program"], retriever=None, **(m.get("program_config") or {}))
    load_program_state(program, doc["state"], path)
    return program



def register(sub: argparse._SubParsersAction) -> None:
    """Add the optimization sub-commands to the top-level parser."""
    p = sub.add_parser("compile", help="compile a program with a teleprompter")
    p.add_argument("program")
    p.add_argument("--train", required=True, help="training split, e.g. asqa:train:50")
    p.add_argument("--dev", default=None, help="held-out split to score the result")
    p.add_argument("--metric", default="d-f1")
    p.add_argument("--optimizer", default="bootstrap", choices=["none", "labeled", "bootstrap"])
    p.add_argument("--k", type=int, default=2, help="demos per predictor")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threshold", type=float, default=None, help="bootstrap metric threshold")
    p.add_argument("--reader", default=None, help="local extractive QA checkpoint for D-F1")
    p.add_argument("--program-config", default=None, help="JSON object of program settings")
    p.add_argument("--out", default=None)
    add_index_args(p)
    add_lm_args(p)
    p.set_defaults(fn=cmd_compile)

    p = sub.add_parser("export", help="render a compiled program's prompts")
    p.add_argument("artifact")
    p.add_argument("--format", default="md", choices=["md", "json"])
    p.add_argument("--out", default=None)
    p.set_defaults(fn=cmd_export)
