"""Metric names: their one spelling, their aliases and which are computed from others.

Both :mod:`ambiqa.evaluation.registry` (name -> scoring function) and
:mod:`ambiqa.evaluation.stats` (set-level statistics) need these facts, so they live here,
below both: neither imports the other for a name.
"""

from __future__ import annotations

#: other spellings users write -> the canonical name
ALIASES: dict[str, str] = {
    "rouge-lsum": "rouge-l", "rougel": "rouge-l", "rouge": "rouge-l",
    "disambig-f1": "d-f1", "df1": "d-f1", "str-exact-match": "str-em",
    "exact-match": "em", "token-f1": "f1",
    "g-p": "g-precision", "g-r": "g-recall", "grounded-precision": "g-precision",
    "grounded-recall": "g-recall", "gf1": "g-f1", "num-interpretations": "n-interp",
    "ungrounded-recall": "interp-recall", "pair-answer-f1": "answer-f1",
}

#: set-level metrics: name -> the per-question metrics they are computed from
SET_LEVEL: dict[str, tuple[str, ...]] = {"dr": ("d-f1", "rouge-l")}
#: the per-question quantity each set-level metric leaves in a row (for plots only)
PER_QUESTION_NAME: dict[str, str] = {"dr": "dr_q"}


def canonical_name(name: str) -> str:
    """The one spelling of metric ``name`` (case, ``_``/``-`` and aliases folded)."""
    key = str(name).strip().lower().replace("_", "-").replace(" ", "")
    return ALIASES.get(key, key)


def set_level_name(metric: str) -> str | None:
    """The canonical set-level name ``metric`` spells (``DR`` -> ``dr``), or None."""
    key = canonical_name(metric)
    return key if key in SET_LEVEL else None


def parts_of(metric: str) -> tuple[str, ...]:
    """The per-question metrics ``metric`` is computed from (itself for a plain mean)."""
    key = set_level_name(metric)
    return SET_LEVEL[key] if key else (metric,)


def with_set_parts(names: list[str]) -> list[str]:
    """``names`` plus the parts a set-level metric is computed from, each before it: DR
    needs every question's D-F1 and ROUGE-L (scoring DR computes both anyway, so this costs
    nothing extra). Given names keep their spelling; parts are added in canonical form."""
    out = list(names)
    have = {canonical_name(n) for n in names}
    for name in names:
        for part in SET_LEVEL.get(canonical_name(name), ()):
            if part not in have:
                have.add(part)
                out.insert(out.index(name), part)
    return out
