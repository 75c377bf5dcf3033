"""What ``--help`` teaches: the programs and the optimizers, one line each.

``ambiqa --help`` and the help of the commands that take a program (``evaluate``,
``compile``, ``ask``, ``tune``, ``export``) end with these lists, built from the registries
(:data:`ambiqa.programs.registry.PROGRAMS` and its ``SUMMARIES``, the teleprompters'
``summary`` in :mod:`ambiqa.optimizers.registry`) so they name exactly what the commands
accept. Nothing here imports DSPy: ``ambiqa --help`` stays a fraction of a second.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap

from ambiqa.optimizers.registry import teleprompter_names, teleprompter_summaries
from ambiqa.programs.registry import PROGRAMS, SUMMARIES

#: which commands list what: programs only, or programs and optimizers
_LISTS: dict[str, tuple[str, ...]] = {
    "evaluate": ("programs", "optimizers"),
    "compile": ("programs", "optimizers"),
    "ask": ("programs", "optimizers"),
    "tune": ("programs",),
    "export": ("programs",),
}


def _rows(items: dict[str, str]) -> list[str]:
    """``  name  its line``, one per item; a line longer than the terminal (as argparse measures
    it, at most 120 columns) wraps under itself."""
    column = max(len(name) for name in (*PROGRAMS, *teleprompter_names())) + 4  # both lists
    width = max(60, min(120, shutil.get_terminal_size().columns - 2))
    lines: list[str] = []
    for name, text in items.items():
        lines += textwrap.wrap(text, width, initial_indent=f"  {name:<{column - 2}}",
                               subsequent_indent=" " * column) or [f"  {name}"]
    return lines


def programs_listing() -> str:
    """One line per registered program (``--program NAME``, a compile or evaluate target)."""
    return "\n".join(["programs (PROGRAM, --program NAME; a TARGET may also be an artifact):",
                      *_rows({name: SUMMARIES[name] for name in PROGRAMS})])


def optimizers_listing() -> str:
    """One line per teleprompter (``ambiqa compile PROGRAM --optimizer NAME``)."""
    return "\n".join(["optimizers (ambiqa compile PROGRAM --optimizer NAME):",
                      *_rows(teleprompter_summaries())])


def epilog(*lists: str) -> str:
    """The listings named (``"programs"``, ``"optimizers"``), a blank line apart."""
    make = {"programs": programs_listing, "optimizers": optimizers_listing}
    return "\n\n".join(make[name]() for name in lists)


def add_listings(parser: argparse.ArgumentParser, sub: argparse._SubParsersAction) -> None:
    """End the top-level help and the program-taking commands' help with the listings.

    A command's own epilog (if any) comes first; the formatter keeps the listings' line
    breaks (argparse would otherwise re-flow them into one paragraph)."""
    _extend(parser, epilog("programs", "optimizers"))
    for command, lists in _LISTS.items():
        _extend(sub.choices[command], epilog(*lists))


def _extend(parser: argparse.ArgumentParser, text: str) -> None:
    parser.epilog = f"{parser.epilog}\n\n{text}" if parser.epilog else text
    if parser.formatter_class is argparse.HelpFormatter:
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
