"""Answering commands: ``ask`` and the end-to-end ``demo``."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import ambiqa
from ambiqa.cli.common import (
    INDEX_ROOT_HELP,
    PROGRAM_CONFIG_HELP,
    add_index_args,
    add_lm_args,
    lm_from_args,
    make_console,
    print_prediction,
    program_or_artifact,
)
from ambiqa.cli.optimize_cmds import compile_and_save, load_for_export
from ambiqa.errors import AmbiqaError
from ambiqa.fsutil import atomic_write_text


def cmd_ask(args: argparse.Namespace) -> int:
    from ambiqa.api.asking import ask, check_question, prediction_json

    check_question(args.question)  # before anything slow loads
    program = program_or_artifact(args, args.artifact or args.program)
    lm_from_args(args)
    pred = ask(program, args.question, label=args.program or args.artifact or "ask")
    if args.json:
        print(json.dumps(prediction_json(pred), indent=2))
    else:
        print_prediction(pred, make_console())
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on the embedded default: index, compile, export, load, ask."""
    from ambiqa.api.jobs import make_reader
    from ambiqa.data import demo_corpus_path, load_dataset
    from ambiqa.optimizers.export import export_prompts, render
    from ambiqa.retrieval.colbert import ColBERTRetriever
    from ambiqa.retrieval.factory import index_root
    from ambiqa.retrieval.indexing import build_index

    console = make_console()
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
        lm = lm_from_args(args)
    console.print(f"2/5 LM {lm.model} ready")
    # 3. compile
    reader = make_reader(None)
    artifact = out_dir / "demo-vanilla_rag.json"
    t0 = time.perf_counter()
    compile_and_save("vanilla_rag", f"demo:train:{args.n_train}", f"demo:dev:{args.n_dev}",
                     "d-f1", args.optimizer, 2, 0, retriever, lm, reader, artifact, {}, None,
                     console)
    console.print(f"3/5 compiled in {time.perf_counter() - t0:.0f} s")
    # 4. export
    prompts_path = out_dir / "demo-vanilla_rag.prompts.md"
    program, manifest = load_for_export(str(artifact), with_manifest=True)  # read once
    atomic_write_text(prompts_path, render(export_prompts(program), "md", manifest=manifest))
    console.print(f"4/5 exported prompts to [bold]{prompts_path}[/bold]")
    # 5. load + ask
    loaded = ambiqa.load(artifact, retriever=retriever)
    # the last dev question: not one the dev scoring just answered (that would be a cache hit)
    question = args.question or load_dataset("demo:dev")[-1].question
    from rich.markup import escape

    console.print(f"5/5 asking the loaded program: [italic]{escape(question)}[/italic]\n")
    pred = loaded(question=question)
    print_prediction(pred, console)
    console.rule(f"demo finished in {time.perf_counter() - t_start:.0f} s")
    return 0



def register(sub: argparse._SubParsersAction) -> None:
    """Add the answering sub-commands to the top-level parser."""
    p = sub.add_parser("ask", help="answer one question")
    p.add_argument("question", help="the question, quoted")
    p.add_argument("--artifact", default=None,
                   help="a compiled artifact or a program's own .save() JSON; it opens the "
                        "index it records unless --index is given")
    p.add_argument("--program", default=None,
                   help="program name when no artifact is given (default vanilla_rag; listed "
                        "below)")
    p.add_argument("--program-config", default=None, help=PROGRAM_CONFIG_HELP)
    p.add_argument("--json", action="store_true",
                   help="print the prediction and its cost trace as JSON")
    add_index_args(p)
    add_lm_args(p)
    p.set_defaults(fn=cmd_ask)

    p = sub.add_parser("demo", help="index, compile, export and ask on the bundled demo set")
    p.add_argument("--out-dir", default="artifacts",
                   help="where the artifact and its exported prompts go (default artifacts)")
    p.add_argument("--index-root", default=None, help=INDEX_ROOT_HELP)
    p.add_argument("--optimizer", default="bootstrap", choices=["none", "labeled", "bootstrap"],
                   help="the teleprompter compiling vanilla_rag (default bootstrap)")
    p.add_argument("--n-train", type=int, default=3,
                   help="demo training questions to compile on (default 3)")
    p.add_argument("--n-dev", type=int, default=2,
                   help="demo dev questions to score the compiled program on (default 2)")
    p.add_argument("--question", default=None,
                   help="the question the loaded program answers at the end (default: the "
                        "last demo dev question)")
    add_lm_args(p)
    p.set_defaults(fn=cmd_demo)
