"""The ``ambiqa`` command line.

Sub-commands live in one module per concern (``retrieval_cmds``, ``eval_cmds``,
``optimize_cmds``, ``run_cmds``), each with a ``register(sub)`` that adds its parsers; this
module only assembles them and maps errors to exit codes.

User errors (bad names, missing files, invalid artifacts) print one clear message and exit
with status 2; there is no traceback unless ``AMBIQA_DEBUG=1``. Anything else is a bug and
keeps its traceback. Every one of these texts is redacted first (URL passwords, API keys an
endpoint echoed: :func:`ambiqa.lm.redact.redact`), the tracebacks too.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext

from ambiqa.cli import (
    catalog,
    eval_cmds,
    optimize_cmds,
    reader_cmds,
    retrieval_cmds,
    run_cmds,
    scale_cmds,
    serve_cmds,
)
from ambiqa.cli.notes import LIVE_WARNINGS, folded_dspy_warnings
from ambiqa.errors import AmbiqaError

EXIT_USER_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    """The full parser: every module's sub-commands under one ``ambiqa`` program."""
    parser = argparse.ArgumentParser(prog="ambiqa", description="ambiqa: ambiguous and "
                                     "multi-hop retrieval-augmented QA with DSPy programs")
    parser.add_argument("--version", action="version", version="ambiqa 0.1.0")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (retrieval_cmds, optimize_cmds, eval_cmds, run_cmds, reader_cmds, scale_cmds):
        module.register(sub)
    serve_cmds.register(sub)
    catalog.add_listings(parser, sub)  # the programs and optimizers, one line each
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = retrieval_cmds.parse_index_add(argv) or build_parser().parse_args(argv)
    # after parsing: --help stays instant (the LM package imports DSPy)
    from ambiqa.lm.redact import install_excepthook, redact

    install_excepthook()  # a bug's traceback is printed redacted, too
    # DSPy's warnings: one ambiqa note each, at the end (a server logs them as they come)
    with nullcontext() if args.command in LIVE_WARNINGS else folded_dspy_warnings():
        try:
            return int(args.fn(args) or 0)
        except AmbiqaError as exc:
            if os.environ.get("AMBIQA_DEBUG") == "1":
                raise  # printed by the redacting hook installed above
            print(f"ambiqa: error: {redact(str(exc))}", file=sys.stderr)
            return EXIT_USER_ERROR
        except KeyboardInterrupt:
            print("ambiqa: interrupted; finished work is kept (rerun with --resume where "
                  "offered)", file=sys.stderr)
            return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
