"""Answering commands: ``ask`` and the end-to-end ``demo``."""

from __future__ import annotations

import argparse
import json

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
    """The main job on the embedded default: index, compile, export, load, ask
    (:func:`ambiqa.api.demo.run_demo`)."""
    from rich.markup import escape

    from ambiqa.api.demo import DemoSettings, run_demo

    console = make_console()
    console.rule("[bold]ambiqa demo[/bold]")
    with console.status("assembling and loading the embedded LM"):
        lm = lm_from_args(args)
    result = run_demo(lm, DemoSettings(out_dir=args.out_dir, index_root=args.index_root,
                                       optimizer=args.optimizer, metric=args.metric,
                                       n_train=args.n_train, n_dev=args.n_dev,
                                       candidates=None if args.all_candidates else [],
                                       question=args.question),
                      say=lambda line: console.print(escape(line)), console=console)
    console.print()
    print_prediction(result.prediction, console)
    console.rule(f"demo finished in {result.seconds:.0f} s")
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
    p.add_argument("--optimizer", default="labeled", choices=["none", "labeled", "bootstrap"],
                   help="the teleprompter compiling vanilla_rag (default labeled: gold demos, "
                        "no LM call; bootstrap traces the LM over the training questions)")
    p.add_argument("--metric", default="str-rouge",
                   help="the compile's objective (default str-rouge, which needs no reader; "
                        "d-f1 reads with the LM stand-in on a machine without reader v3)")
    p.add_argument("--n-train", type=int, default=3,
                   help="demo training questions to compile on (default 3)")
    p.add_argument("--n-dev", type=int, default=0,
                   help="demo dev questions to score the compiled program on (default 0: the "
                        "choice on a held-out training question is the check)")
    p.add_argument("--all-candidates", action="store_true",
                   help="score the compile's default demo plans too (three more programs)")
    p.add_argument("--question", default=None,
                   help="the question the loaded program answers at the end (default: the "
                        "last demo dev question)")
    add_lm_args(p)
    p.set_defaults(fn=cmd_demo)
