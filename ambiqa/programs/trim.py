"""Passages trimmed to the sentences that bear on the question (issue 45, item 2).

Why: Diva's, ToC's and VerDICt's prompts are mostly passages. In Diva's ASQA throughput run
(``benchmarks/results/throughput-diva/table.md``) the calls that carry the kept passages --
verifier, clarify and long-answer writer -- take 800-1,000 prompt tokens each against ~500 for
the passage-free typing calls, and make up most of the ~4,700 prompt tokens per question; on
the embedded 1.5B the prompt is what costs the time. A passage of eight sentences on the
iPhone's history answers "when was the first iPhone made?" in one or two of them.

What: :func:`trim_passages` keeps, per passage, the ``keep`` sentences most similar to the
texts the prompt must bear on (the question, its interpretations, a node's question and
answer): each sentence's score is its highest cosine to any of those texts under the
program's sentence encoder (the one it already holds, all-MiniLM-L6-v2 by default). The kept
sentences stay in their original order; where sentences were skipped between two kept ones
the text says `` … ``. A passage of ``keep`` sentences or fewer comes back unchanged; the
title, id and score are kept, so a cited passage number still maps to the same id.

This is a declared deviation from the papers, which show whole passages
(``docs/methods.md``, "Trimmed passages"); it is off by default (``trim_sentences=None``), and
a program's *returned* passages are always the untrimmed ones (citations, recall@k). Sentences
are split by the ASQA scorer's Punkt splitter (:func:`ambiqa.evaluation.metrics.split_sentences`),
so "U.S." or "Dr." do not end a sentence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ambiqa.evaluation.metrics import split_sentences
from ambiqa.retrieval.encoder import unit_rows
from ambiqa.types import Passage

#: what stands between two kept sentences that had skipped sentences between them
GAP = " … "


def _texts(queries: str | Iterable[str]) -> list[str]:
    """The query texts, whitespace-squeezed, blanks and repeats dropped, order kept."""
    items = [queries] if isinstance(queries, str) else list(queries)
    return [t for t in dict.fromkeys(" ".join(str(q or "").split()) for q in items) if t]


def pick_sentences(scores: Sequence[float], keep: int) -> list[int]:
    """Indices of the ``keep`` highest ``scores`` in ascending (text) order; a tie goes to
    the earlier sentence."""
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    return sorted(order[:keep])


def join_kept(sentences: Sequence[str], kept: Sequence[int]) -> str:
    """The kept sentences in order: a space between neighbours, :data:`GAP` where sentences
    were skipped between them."""
    out = ""
    for n, i in enumerate(kept):
        if n:
            out += " " if i == kept[n - 1] + 1 else GAP
        out += sentences[i].strip()
    return out


def trim_passages(passages: Sequence[Passage], queries: str | Iterable[str], encoder: Any,
                  keep: int | None, *, cache: dict[str, np.ndarray] | None = None
                  ) -> list[Passage]:
    """Copies of ``passages`` whose text keeps only the ``keep`` sentences most similar (max
    cosine over ``queries``) to the query texts, in their original order.

    ``keep=None`` (trimming off), no query text, or no passage longer than ``keep`` sentences:
    the passages come back as they are. ``encoder`` is any object with ``.encode(list[str])``
    returning one row per text (rows are normalised here). ``cache`` (sentence text → unit
    vector), when given, is read and filled, so a program that shows one passage in several
    prompts (ToC's tree) encodes each sentence once; queries and the uncached sentences go to
    the encoder in one batch.
    """
    passages = list(passages)
    texts = _texts(queries)
    if keep is None or not texts or not passages:
        return passages
    split = [split_sentences(p.text) for p in passages]
    long_ = [i for i, sents in enumerate(split) if len(sents) > keep]
    if not long_:
        return passages
    vectors = {} if cache is None else cache
    todo = list(dict.fromkeys(s for i in long_ for s in split[i] if s not in vectors))
    rows = unit_rows(encoder.encode(texts + todo))
    query_vecs = rows[:len(texts)]
    for sentence, vec in zip(todo, rows[len(texts):], strict=True):
        vectors[sentence] = vec
    out = list(passages)
    for i in long_:
        sents = split[i]
        scores = (np.stack([vectors[s] for s in sents]) @ query_vecs.T).max(axis=1)
        out[i] = replace(passages[i], text=join_kept(sents, pick_sentences(scores, keep)))
    return out


def trimmed_for(program: Any, passages: Sequence[Passage], queries: str | Iterable[str], *,
                cache: dict[str, np.ndarray] | None = None) -> list[Passage]:
    """The passages as ``program``'s prompts show them: trimmed to its ``trim_sentences``
    (:func:`trim_passages`, with its ``encoder``), or as they are when that is ``None``.

    The encoder is read only when trimming is on, so a program that never needs one (VerDICt
    with a single candidate) loads no model for this.
    """
    keep = getattr(program, "trim_sentences", None)
    if keep is None:
        return list(passages)
    return trim_passages(passages, queries, program.encoder, keep, cache=cache)
