"""What ``--help`` teaches: the programs and the optimizers, one line each.

``ambiqa --help`` and the help of the commands that take a program (``evaluate``,
``compile``, ``ask``, ``tune``, ``export``) end with these lists, built from the registries
(:data:`ambiqa.programs.registry.PROGRAMS` and its ``SUMMARIES``,
:data:`ambiqa.optimizers.recipes.TELEPROMPTERS`) so they name exactly what the commands
accept. Nothing here imports DSPy: ``ambiqa --help`` stays a fraction of a second.
"""

from __future__ import annotations

import argparse
import textwrap

from ambiqa.optimizers.recipes import TELEPROMPTERS
from ambiqa.programs.registry import PROGRAMS, SUMMARIES

#: teleprompter → one line (:mod:`ambiqa.optimizers.compile` describes each in full); every
#: name in TELEPROMPTERS has one (``tests/unit/cli/test_help.py`` checks)
OPTIMIZER_SUMMARIES: dict[str, str] = {
    "none": "the program as written (zero-shot), for a baseline; no LM call",
    "labeled": "k gold demos per predictor from the training data; no LM call",
    "bootstrap": "traces of training runs that pass the metric, as demos (default)",
    "bootstrap-rs": "bootstrapped demo sets scored on held-out questions; best kept",
    "knn": "per question, the k nearest demos of a gold + bootstrapped pool",
    "mipro": "dspy.MIPROv2: instructions and demos by Bayesian search",
    "gepa": "dspy.GEPA: instructions evolved by reflection (strong --reflection-lm)",
    "simba": "dspy.SIMBA: mini-batch ascent adding self-written rules and demos",
}

#: the listings' width: a name column, then the line (kept short enough not to wrap)
_WIDTH = 90

#: which commands list what: programs only, or programs and optimizers
_LISTS: dict[str, tuple[str, ...]] = {
    "evaluate": ("programs", "optimizers"),
    "compile": ("programs", "optimizers"),
    "ask": ("programs", "optimizers"),
    "tune": ("programs",),
    "export": ("programs",),
}


def _rows(items: dict[str, str]) -> list[str]:
    column = max(len(name) for name in (*PROGRAMS, *TELEPROMPTERS)) + 4  # one for both lists
    lines: list[str] = []
    for name, text in items.items():
        lines += textwrap.wrap(text, _WIDTH, initial_indent=f"  {name:<{column - 2}}",
                               subsequent_indent=" " * column) or [f"  {name}"]
    return lines


def programs_listing() -> str:
    """One line per registered program (``--program NAME``, a compile or evaluate target)."""
    return "\n".join(["programs (PROGRAM, --program NAME; a TARGET may also be an artifact):",
                      *_rows({name: SUMMARIES[name] for name in PROGRAMS})])


def optimizers_listing() -> str:
    """One line per teleprompter (``ambiqa compile PROGRAM --optimizer NAME``)."""
    return "\n".join(["optimizers (ambiqa compile PROGRAM --optimizer NAME):",
                      *_rows({name: OPTIMIZER_SUMMARIES.get(name, "") for name in TELEPROMPTERS})])


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
