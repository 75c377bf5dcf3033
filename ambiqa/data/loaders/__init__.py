"""Loaders: released QA data formats → ``dspy.Example`` lists with ``question`` as the input.

Each loader reads one file in the layout its authors released (the full-size original) and
also the trimmed copies under ``shared/data``, which keep the same layouts. The examples share
field names across data sets so metrics and optimizers need no per-data-set code:

==================  ==============================================================
``question``        the question a program receives (the only input field)
``id``              a record id, unique within the loaded list
``answers``         flat list of acceptable short answers (every loader)
``qa_pairs``        ASQA / AmbigNQ / demo: ``[{"question", "short_answers": [str]}]``
``long_answers``    ASQA / demo: the annotators' long answers
``gold_passages``   ASQA / NQ / demo: ``[{"title", "text"}]`` the file gives (may be empty)
==================  ==============================================================

Data-set specific fields are listed on each loader. A malformed record raises
:class:`~ambiqa.errors.DataError` naming the file, the line or record and the field.

One module per family of data sets -- :mod:`~ambiqa.data.loaders.ambiguous` (ASQA, AmbigNQ,
SituatedQA), :mod:`~ambiqa.data.loaders.multihop` (HotpotQA, 2WikiMultihopQA) and
:mod:`~ambiqa.data.loaders.open_domain` (NQ, TriviaQA, WebQuestions), and
:mod:`~ambiqa.data.loaders.plain` (a user's own questions, ``jsonl:PATH``) -- over the shared steps
in :mod:`~ambiqa.data.loaders.common`; this front holds the format registry.
"""

from __future__ import annotations

from collections.abc import Callable

import dspy

from ambiqa.data.loaders.ambiguous import load_ambignq, load_asqa, load_situatedqa
from ambiqa.data.loaders.multihop import load_2wikimultihopqa, load_hotpotqa
from ambiqa.data.loaders.open_domain import load_nq, load_triviaqa, load_webq
from ambiqa.data.loaders.plain import load_jsonl, metrics_for

Loader = Callable[..., list[dspy.Example]]

# Format name → loader; a dataset spec's name is looked up here for ``FORMAT:/path`` specs.
FORMATS: dict[str, Loader] = {
    "asqa": load_asqa,
    "ambignq": load_ambignq,
    "situatedqa": load_situatedqa,
    "hotpotqa": load_hotpotqa,
    "2wikimultihopqa": load_2wikimultihopqa,
    "nq": load_nq,
    "triviaqa": load_triviaqa,
    "webq": load_webq,
    # the plain layout for a user's own questions (see ambiqa.data.loaders.plain)
    "jsonl": load_jsonl,
}

__all__ = [
    "FORMATS", "Loader", "load_2wikimultihopqa", "load_ambignq", "load_asqa", "load_hotpotqa",
    "load_jsonl", "load_nq", "load_situatedqa", "load_triviaqa", "load_webq", "metrics_for",
]
