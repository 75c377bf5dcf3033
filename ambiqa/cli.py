"""The ``ambiqa`` command line: index · compile · evaluate · export · ask · demo · doctor.

User errors (bad names, missing files, invalid artifacts) print one clear message and exit
with status 2; there is no traceback unless ``AMBIQA_DEBUG=1``. Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ambiqa.errors import AmbiqaError, ConfigError

EXIT_USER_ERROR = 2


# --------------------------------------------------------------------------- shared helpers
def _console():
    from rich.console import Console

    # emoji off: rich would turn dataset specs like "demo:train:3" into a train emoji
    return Console(stderr=False, highlight=False, emoji=False)


def _lm_from_args(args: argparse.Namespace) -> Any:
    from ambiqa.lm import configure, make_lm

    lm = make_lm(args.lm, api_base=args.api_base, api_key_env=args.api_key_env,
                 max_tokens=args.max_tokens, threads=args.lm_threads, cache=not args.no_cache)
    return configure(lm)


def _retriever_from_args(args: argparse.Namespace, needed: bool = True) -> Any:
    if not getattr(args, "index", None):
        if needed:
            raise ConfigError("this program needs a retriever",
                              hint="pass --index NAME (build one with `ambiqa index CORPUS "
                                   "--name NAME`)")
        return None
    from ambiqa.retrieval.factory import open_retriever

    return open_retriever(args.index, root=Path(args.index_root) if args.index_root else None)


def _program_config(args: argparse.Namespace) -> dict[str, Any]:
    raw = getattr(args, "program_config", None)
    if not raw:
        return {}
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--program-config is not valid JSON: {exc.msg}") from exc
    if not isinstance(cfg, dict):
        raise ConfigError("--program-config must be a JSON object, e.g. '{\"k\": 5}'")
    return cfg


def _metric_fns(names: list[str], reader: Any) -> dict[str, Any]:
    from ambiqa.evaluation.registry import get_metric

    fns = {}
    for name in names:
        fn = get_metric(name)
        fns[name] = (lambda f: (lambda ex, pred: f(ex, pred, reader=reader)))(fn)
    return fns


def _reader_from_args(args: argparse.Namespace) -> Any:
    from ambiqa.evaluation.reader import make_reader

    return make_reader(getattr(args, "reader", None))


def _print_prediction(pred: Any, console: Any) -> None:
    from rich.markup import escape  # model output and passages are data, never markup

    console.print(f"[bold]Answer[/bold]\n{escape(pred.answer)}\n")
    if pred.interpretations:
        console.print("[bold]Interpretations[/bold]")
        for i, it in enumerate(pred.interpretations, 1):
            cites = ", ".join(it.get("passages") or []) or "no citation"
            console.print(f"  {i}. {escape(it['question'])} → {escape(it['answer'])}  "
                          f"[dim]({escape(cites)})[/dim]")
    if pred.passages:
        console.print("\n[bold]Passages read[/bold]")
        for p in pred.passages[:10]:
            console.print(escape(f"  [{p['id']}] {p['title']}: {p['text'][:110]}…"))
    t = pred.trace
    console.print(f"\n[dim]{t['lm_calls']} LM calls, {t['input_tokens']}+{t['output_tokens']} "
                  f"tokens, {t['retriever_calls']} retriever calls, {t['wall_s']:.1f} s"
                  + (escape(f"; degraded steps: {t['events']}") if t["events"] else "")
                  + "[/dim]")


# --------------------------------------------------------------------------- commands
def cmd_index(args: argparse.Namespace) -> int:
    from ambiqa.retrieval.colbert import build_index

    corpus = Path(args.corpus)
    if not corpus.is_file():
        raise ConfigError(f"corpus file not found: {corpus}")
    t0 = time.perf_counter()
    retriever = build_index(corpus, args.name,
                            index_root=Path(args.index_root) if args.index_root else None,
                            checkpoint=Path(args.checkpoint) if args.checkpoint else None,
                            progress=True)
    print(f"index {args.name!r} ready ({retriever.fingerprint}) in "
          f"{time.perf_counter() - t0:.0f} s")
    return 0


def _compile(program_name: str, train_spec: str, dev_spec: str | None, metric: str,
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
        summary = evaluate(compiled, devset, _metric_fns([metric], reader), progress=False)
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
    retriever = _retriever_from_args(args, needed=cls.needs_retriever)
    lm = _lm_from_args(args)
    out = Path(args.out or f"artifacts/{args.program}.json")
    _compile(args.program, args.train, args.dev, args.metric, args.optimizer, args.k, args.seed,
             retriever, lm, _reader_from_args(args), out, _program_config(args),
             args.threshold, _console())
    return 0


def _program_or_artifact(args: argparse.Namespace, target: str | None) -> Any:
    from ambiqa.optimizers.artifact import load_artifact
    from ambiqa.programs.registry import build_program, program_class

    if target and (target.endswith(".json") or Path(target).is_file()):
        retriever = _retriever_from_args(args, needed=False)
        return load_artifact(target, retriever=retriever)
    name = target or "vanilla_rag"
    cls = program_class(name)
    return build_program(name, retriever=_retriever_from_args(args, cls.needs_retriever),
                         **_program_config(args))


def cmd_ask(args: argparse.Namespace) -> int:
    from ambiqa.programs.base import check_question

    check_question(args.question)
    program = _program_or_artifact(args, args.artifact or args.program)
    _lm_from_args(args)
    pred = program(question=args.question)
    if args.json:
        from ambiqa.evaluation.runner import _prediction_dict

        print(json.dumps({**_prediction_dict(pred), "trace": pred.trace}, indent=2))
    else:
        _print_prediction(pred, _console())
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ambiqa.data import load_dataset
    from ambiqa.evaluation.runner import RunSpec, evaluate

    examples = load_dataset(args.data)
    program = _program_or_artifact(args, args.target)
    _lm_from_args(args)
    names = [m.strip() for m in args.metrics.split(",") if m.strip()]
    reader = _reader_from_args(args)
    metrics = _metric_fns(names, reader)
    spec = RunSpec(program=args.target, data=args.data, metrics=names,
                   reader=getattr(reader, "name", None), lm=args.lm)
    summary = evaluate(program, examples, metrics, out_dir=Path(args.out), spec=spec,
                       resume=args.resume, threads=args.threads)
    console = _console()
    console.print(f"[bold]{args.target}[/bold] on {args.data}: n={summary['n']}, "
                  f"errors={summary['n_errors']} (reader: {spec.reader})")
    for name, m in summary["metrics"].items():
        console.print(f"  {name:10s} {m['mean']:.4f}  95% CI \\[{m['ci95'][0]:.4f}, "
                      f"{m['ci95'][1]:.4f}]")
    console.print(f"  cost/question: {summary['cost']}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ambiqa.optimizers.artifact import read_artifact
    from ambiqa.optimizers.export import export_prompts, render

    doc = read_artifact(args.artifact)
    program = _load_for_export(args.artifact)
    text = render(export_prompts(program), args.format, manifest=doc["manifest"])
    if args.out:
        from ambiqa.fsutil import atomic_write_text

        atomic_write_text(Path(args.out), text)
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


def _load_for_export(path: str) -> Any:
    """Export needs the predictors, not the index: build the program without a retriever."""
    from ambiqa.optimizers.artifact import load_program_state, read_artifact
    from ambiqa.programs.registry import build_program

    doc = read_artifact(path)
    m = doc["manifest"]
    program = build_program(m["program"], retriever=None, **(m.get("program_config") or {}))
    load_program_state(program, doc["state"], path)
    return program


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on the embedded default: index, compile, export, load, ask."""
    import ambiqa
    from ambiqa.data import demo_corpus_path, load_dataset
    from ambiqa.evaluation.reader import make_reader
    from ambiqa.optimizers.export import export_prompts, render
    from ambiqa.retrieval.colbert import ColBERTRetriever, build_index
    from ambiqa.retrieval.factory import index_root

    console = _console()
    t_start = time.perf_counter()
    out_dir = Path(args.out_dir)
    console.rule("[bold]ambiqa demo[/bold]")
    # 1. index
    root = Path(args.index_root) if args.index_root else index_root()
    with console.status("opening / building the ColBERT index over the bundled demo corpus"):
        t0 = time.perf_counter()
        try:
            retriever = ColBERTRetriever.load(root, "demo")
        except AmbiqaError:
            retriever = build_index(demo_corpus_path(), "demo", index_root=root, progress=False)
    console.print(f"1/5 index [bold]demo[/bold] ready in {time.perf_counter() - t0:.0f} s")
    # 2. LM
    with console.status("assembling and loading the embedded LM"):
        lm = _lm_from_args(args)
    console.print(f"2/5 LM {lm.model} ready")
    # 3. compile
    reader = make_reader(None)
    artifact = out_dir / "demo-vanilla_rag.json"
    t0 = time.perf_counter()
    _compile("vanilla_rag", f"demo:train:{args.n_train}", f"demo:dev:{args.n_dev}", "d-f1",
             args.optimizer, 2, 0, retriever, lm, reader, artifact, {}, None, console)
    console.print(f"3/5 compiled in {time.perf_counter() - t0:.0f} s")
    # 4. export
    prompts_path = out_dir / "demo-vanilla_rag.prompts.md"
    program = _load_for_export(str(artifact))
    from ambiqa.fsutil import atomic_write_text
    from ambiqa.optimizers.artifact import read_artifact

    atomic_write_text(prompts_path, render(export_prompts(program), "md",
                                            manifest=read_artifact(artifact)["manifest"]))
    console.print(f"4/5 exported prompts to [bold]{prompts_path}[/bold]")
    # 5. load + ask
    loaded = ambiqa.load(artifact, retriever=retriever)
    # the last dev question: not one the dev scoring just answered (that would be a cache hit)
    question = args.question or load_dataset("demo:dev")[-1].question
    from rich.markup import escape

    console.print(f"5/5 asking the loaded program: [italic]{escape(question)}[/italic]\n")
    pred = loaded(question=question)
    _print_prediction(pred, console)
    console.rule(f"demo finished in {time.perf_counter() - t_start:.0f} s")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from ambiqa.doctor import run_checks

    ok = run_checks(print_fn=print)
    return 0 if ok else 1


# --------------------------------------------------------------------------- parser
def _add_lm_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("LM")
    g.add_argument("--lm", default=None,
                   help="'embedded' (default, Qwen2.5-Coder-1.5B), 'embedded:qwen2.5-coder-0.5b'"
                        " (fast), or provider/model for an endpoint (env AMBIQA_LM)")
    g.add_argument("--api-base", default=None, help="endpoint URL (OpenAI-compatible servers)")
    g.add_argument("--api-key-env", default=None,
                   help="name of the environment variable holding the API key")
    g.add_argument("--max-tokens", type=int, default=512)
    g.add_argument("--lm-threads", type=int, default=None, help="embedded LM threads")
    g.add_argument("--no-cache", action="store_true", help="disable DSPy's response cache")


def _add_index_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index", default=None, help="index name ([kind:]name, kind colbert|bm25|"
                                                 "dense; default colbert)")
    p.add_argument("--index-root", default=None, help="directory holding indexes")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ambiqa", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version="ambiqa 0.1.0")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("index", help="build a ColBERT index over a JSONL corpus")
    p.add_argument("corpus")
    p.add_argument("--name", required=True)
    p.add_argument("--index-root", default=None)
    p.add_argument("--checkpoint", default=None, help="ColBERT checkpoint directory")
    p.set_defaults(fn=cmd_index)

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
    _add_index_args(p)
    _add_lm_args(p)
    p.set_defaults(fn=cmd_compile)

    p = sub.add_parser("evaluate", help="evaluate a program or artifact on a data split")
    p.add_argument("target", help="program name or artifact path")
    p.add_argument("--data", required=True, help="e.g. asqa:dev:50")
    p.add_argument("--metrics", default="str-em,rouge-l,d-f1,dr")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reader", default=None)
    p.add_argument("--program-config", default=None)
    _add_index_args(p)
    _add_lm_args(p)
    p.set_defaults(fn=cmd_evaluate)

    p = sub.add_parser("export", help="render a compiled program's prompts")
    p.add_argument("artifact")
    p.add_argument("--format", default="md", choices=["md", "json"])
    p.add_argument("--out", default=None)
    p.set_defaults(fn=cmd_export)

    p = sub.add_parser("ask", help="answer one question")
    p.add_argument("question")
    p.add_argument("--artifact", default=None)
    p.add_argument("--program", default=None, help="program name when no artifact is given")
    p.add_argument("--program-config", default=None)
    p.add_argument("--json", action="store_true")
    _add_index_args(p)
    _add_lm_args(p)
    p.set_defaults(fn=cmd_ask)

    p = sub.add_parser("demo", help="index, compile, export and ask on the bundled demo set")
    p.add_argument("--out-dir", default="artifacts")
    p.add_argument("--index-root", default=None)
    p.add_argument("--optimizer", default="bootstrap", choices=["none", "labeled", "bootstrap"])
    p.add_argument("--n-train", type=int, default=3)
    p.add_argument("--n-dev", type=int, default=2)
    p.add_argument("--question", default=None)
    _add_lm_args(p)
    p.set_defaults(fn=cmd_demo)

    p = sub.add_parser("doctor", help="check the installation and print fixes")
    p.set_defaults(fn=cmd_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except AmbiqaError as exc:
        if os.environ.get("AMBIQA_DEBUG") == "1":
            raise
        print(f"ambiqa: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("ambiqa: interrupted; finished work is kept (rerun with --resume where offered)",
              file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
