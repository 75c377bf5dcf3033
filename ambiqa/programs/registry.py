"""Program names → classes, with a helpful error for typos.

The one list of programs: ``ambiqa``'s top-level names (``ambiqa.Diva``, ...) are built from
:data:`PROGRAMS`, the CLI's ``--help`` from :data:`SUMMARIES`. The table holds ``"module:Class"``
strings so that reading it imports no program (and no DSPy): ``import ambiqa`` reads it.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from ambiqa.errors import ConfigError

# name → "module:Class"; imported lazily so listing names costs nothing.
PROGRAMS: dict[str, str] = {
    "closed_book": "ambiqa.programs.closed_book:ClosedBook",
    "vanilla_rag": "ambiqa.programs.vanilla_rag:VanillaRAG",
    "query_refinement": "ambiqa.programs.query_refinement:QueryRefinementClosedBook",
    "diva": "ambiqa.programs.diva:Diva",
    "toc": "ambiqa.programs.toc:TreeOfClarifications",
    "verdict": "ambiqa.programs.verdict:VerDICt",
    "resp": "ambiqa.programs.resp:ReSP",
    "ircot": "ambiqa.programs.ircot:IRCoT",
    "eor": "ambiqa.programs.eor:EoR",
}

#: name → one line for ``--help`` (``ambiqa.cli.catalog``), readable without importing DSPy;
#: every registered program has one (``tests/unit/cli/test_help.py`` checks)
SUMMARIES: dict[str, str] = {
    "closed_book": "the LM alone, no retrieval: the floor to beat",
    "vanilla_rag": "retrieve once, cover every reading in one long answer (the default)",
    "query_refinement": "closed book: name the question's readings, then answer them all",
    "diva": "Diva: guess readings, retrieve for each, verify, adapt the answer",
    "toc": "Tree of Clarifications: clarified questions pruned by self-checks",
    "verdict": "VerDICt: one read per passage, readings clustered and verified",
    "resp": "ReSP: retrieve, summarize, plan; iterative, for multi-hop questions",
    "ircot": "IRCoT-style: reasoning interleaved with retrieval, for multi-hop",
    "eor": "Ensemble of Retrievers: an answer per retriever, the agreed one wins",
}


def program_class(name: str) -> type:
    key = name.strip().lower().replace("-", "_")
    target = PROGRAMS.get(key)
    if target is None:
        close = difflib.get_close_matches(key, PROGRAMS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"choose one of {', '.join(PROGRAMS)}"
        raise ConfigError(f"unknown program {name!r}", hint=hint)
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def build_program(name: str, retriever: Any = None, **config: Any) -> Any:
    """Instantiate a program by name; unknown config keys are an error, not ignored."""
    cls = program_class(name)
    try:
        return cls(retriever=retriever, **config)
    except TypeError as exc:
        raise ConfigError(f"bad settings for program {name!r}: {exc}") from exc
