"""Retrieval commands: ``index`` (and ``doctor``, which checks indexes among other things)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ambiqa.errors import ConfigError


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


def cmd_doctor(args: argparse.Namespace) -> int:
    from ambiqa.doctor import run_checks

    ok = run_checks(print_fn=print)
    return 0 if ok else 1



def register(sub: argparse._SubParsersAction) -> None:
    """Add the retrieval sub-commands to the top-level parser."""
    p = sub.add_parser("index", help="build a ColBERT index over a JSONL corpus")
    p.add_argument("corpus")
    p.add_argument("--name", required=True)
    p.add_argument("--index-root", default=None)
    p.add_argument("--checkpoint", default=None, help="ColBERT checkpoint directory")
    p.set_defaults(fn=cmd_index)

    p = sub.add_parser("doctor", help="check the installation and print fixes")
    p.set_defaults(fn=cmd_doctor)
