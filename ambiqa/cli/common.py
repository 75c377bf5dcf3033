"""Helpers every ``ambiqa`` sub-command shares: LM, retriever, metrics, console, argument groups."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.jsonio import MAX_DEPTH, depth_ok
from ambiqa.programs.registry import program_class


def make_console():
    from rich.console import Console

    # emoji off: rich would turn dataset specs like "demo:train:3" into a train emoji
    return Console(stderr=False, highlight=False, emoji=False)


def lm_spec(args: argparse.Namespace) -> Any:
    """The LM flags as an :class:`ambiqa.api.LMSpec`: data the api builds the LM from, once,
    after its cheap checks (the CLI never builds one for the api)."""
    from ambiqa.api import LMSpec  # the api loads DSPy: not for `ambiqa --help`

    return LMSpec(model=args.lm, api_base=args.api_base, api_key_env=args.api_key_env,
                  max_tokens=args.max_tokens, threads=args.lm_threads, cache=not args.no_cache)


def lm_from_args(args: argparse.Namespace) -> Any:
    """The flags' LM, built (an endpoint probed first: a cache must never answer for a dead
    one, issue 42) and configured with ambiqa's tracing, for the commands that call a
    program themselves (``ask``, ``demo``, ``compile``)."""
    from ambiqa.api.jobs import use_lm  # the api loads DSPy: not for `ambiqa --help`

    return use_lm(lm_spec(args))


def retriever_from_args(args: argparse.Namespace, needed: bool = True) -> Any:
    if not getattr(args, "index", None):
        if needed:
            raise ConfigError("this program needs a retriever",
                              hint="pass --index NAME (build one with `ambiqa index CORPUS "
                                   "--name NAME`)")
        return None
    from ambiqa.retrieval.factory import open_retriever

    return open_retriever(args.index, root=Path(args.index_root) if args.index_root else None)


def program_config(args: argparse.Namespace) -> dict[str, Any]:
    raw = getattr(args, "program_config", None)
    if not raw:
        return {}
    if not depth_ok(raw):  # the recursive parser would end in a RecursionError traceback
        raise ConfigError(f"--program-config nests deeper than {MAX_DEPTH} levels")
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--program-config is not valid JSON: {exc.msg}") from exc
    if not isinstance(cfg, dict):
        raise ConfigError("--program-config must be a JSON object, e.g. '{\"k\": 5}'")
    return cfg


def metric_fns(names: list[str], reader: Any) -> dict[str, Any]:
    """Each metric (set-level parts included) bound to ``reader``: the api's
    :func:`ambiqa.api.jobs.metric_fns`, the one place that binds them."""
    from ambiqa.api.jobs import metric_fns as bind  # the api loads DSPy: not for --help

    return bind(names, reader)


def reader_from_args(args: argparse.Namespace) -> Any:
    """The D-F1 reader ``--reader`` names, made by the api (:func:`ambiqa.api.jobs.make_reader`)."""
    from ambiqa.api.jobs import make_reader  # the api loads DSPy: not for --help

    return make_reader(getattr(args, "reader", None))


def print_prediction(pred: Any, console: Any) -> None:
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
    cached = t.get("cached_calls") or 0
    console.print(f"\n[dim]{t['lm_calls']} LM calls"
                  + (f" ({cached} from the response cache; --no-cache asks the LM)"
                     if cached else "")
                  + f", {t['input_tokens']}+{t['output_tokens']} "
                  f"tokens, {t['retriever_calls']} retriever calls, {t['wall_s']:.1f} s"
                  + (escape(f"; degraded steps: {t['events']}") if t["events"] else "")
                  + "[/dim]")


def program_or_artifact(args: argparse.Namespace, target: str | None) -> Any:
    """The program a command runs: a program name, an artifact or a saved program, resolved by
    :func:`ambiqa.api.targets.resolve` (the one place that decides). ``--index`` replaces the
    index a file records; a file otherwise opens its own."""
    from ambiqa.api.targets import is_file_target, resolve
    name = target or "vanilla_rag"
    if is_file_target(name):  # the one loader: read once, then the index (--index or its own)
        return resolve(name, index=getattr(args, "index", None) or None,
                       index_root=getattr(args, "index_root", None)).program
    cls = program_class(name)
    return resolve(name, retriever=retriever_from_args(args, cls.needs_retriever),
                   config=program_config(args) or None).program


def at_least(minimum: int):
    """An argparse ``type`` for an integer of at least ``minimum``: a bad value is refused
    with one line while the arguments are parsed, before any model loads (issue 33)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def finite_seconds(text: str) -> float:
    """An argparse ``type`` for a number of seconds that must be finite. ``nan`` and ``inf``
    parse as floats and passed every ``<= 0`` check (``inf`` then overflowed a timer, ``nan``
    disabled the deadline: issue 42), so they are refused here, while the arguments are
    parsed, with one line. Whether the value is positive is the command's own check (with the
    option's name in its message), as before."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") \
            from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, got {text!r}")
    return value


finite_seconds.__name__ = "seconds"


def add_lm_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("LM")
    g.add_argument("--lm", default=None,
                   help="'embedded' (default, Qwen2.5-Coder-1.5B), 'embedded:qwen2.5-coder-0.5b'"
                        " (fast), or provider/model for an endpoint (env AMBIQA_LM)")
    g.add_argument("--api-base", default=None, help="endpoint URL (OpenAI-compatible servers)")
    g.add_argument("--api-key-env", default=None,
                   help="name of the environment variable holding the API key")
    g.add_argument("--max-tokens", type=at_least(1), default=512,
                   help="most tokens one LM reply may have (default 512; the embedded LM also "
                        "caps each step at its signature's own limit)")
    g.add_argument("--lm-threads", type=at_least(1), default=None, help="embedded LM threads")
    g.add_argument("--no-cache", action="store_true", help="disable DSPy's response cache")


#: ``--index-root`` help shared by every command that opens or builds an index
INDEX_ROOT_HELP = ("directory holding indexes (default $AMBIQA_INDEX_ROOT, else "
                   "$AMBIQA_CACHE/indexes)")


def add_index_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index", default=None,
                   help="index name, as given to `ambiqa index --name` (its kind is read from "
                        "the index's manifest; kind:name, kind colbert|bm25|dense, also works)")
    p.add_argument("--index-root", default=None, help=INDEX_ROOT_HELP)




#: the help of a program-name argument (the names and what each does: the parser's epilog)
PROGRAM_HELP = "program name (listed below)"

#: ``--program-config`` help shared by every command that builds a program by name.
PROGRAM_CONFIG_HELP = ("the program's settings as a JSON object, e.g. '{\"k\": 5}' (fields: "
                       "ambiqa/programs/config.py; with a program name only, an artifact "
                       "keeps its own)")

#: ``--reader`` help shared by every command that scores D-F1.
READER_HELP = ("D-F1 reader: 'extractive' (the reader `ambiqa reader train` builds; the default "
               "once built), 'lm' (the LM stand-in) or a local extractive QA checkpoint directory")
