"""Deterministic parts of one evaluation: ``ambiqa evaluate ... --part I/N``.

The run evaluates the I-th of N contiguous, near-equal slices of the examples the data spec
names (:func:`part_bounds`). The slice depends only on the example count and ``I/N``, so N
machines given the same command with ``--part 1/N`` .. ``N/N`` cover every question exactly
once. Each part records ``part`` (``"I/N"``) and ``part_ids`` (its example ids, in data order)
in its ``run.json``; ``part`` is a resume setting, so a part never resumes into another part's
directory. :mod:`ambiqa.evaluation.reports.merge` joins the parts back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.evaluation.runs.run_dir import data_fingerprint

__all__ = ["PART_KEYS", "PartSpec", "parse_part", "part_bounds", "part_of", "part_slice"]

#: run.json keys that differ between parts by design (everything else must be equal)
PART_KEYS = frozenset({"part", "part_ids"})

_PART_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class PartSpec:
    """The I-th (1-based) of N parts."""

    index: int
    of: int

    def __str__(self) -> str:
        return f"{self.index}/{self.of}"


def parse_part(text: str) -> PartSpec:
    """``"2/4"`` -> ``PartSpec(2, 4)``; a malformed or out-of-range part is a ConfigError."""
    m = _PART_RE.match(str(text))
    if not m:
        raise ConfigError(f"--part {text!r} is not of the form I/N",
                          hint="e.g. --part 1/4 (the first of four parts)")
    index, of = int(m.group(1)), int(m.group(2))
    if of < 1 or not 1 <= index <= of:
        raise ConfigError(f"--part {text}: I must be within 1..N and N at least 1",
                          hint=f"use --part 1/{max(of, 1)} .. {max(of, 1)}/{max(of, 1)}")
    return PartSpec(index, of)


def part_bounds(n: int, part: PartSpec) -> tuple[int, int]:
    """``[start, end)`` of ``part`` among ``n`` examples: contiguous, sizes differ by <= 1.

    Contiguous (not interleaved) so a part is a question range a person can name, and the
    parts' rows concatenated in part order are the data order.
    """
    return (part.index - 1) * n // part.of, part.index * n // part.of


def part_slice(examples: list[Any], part: PartSpec) -> list[Any]:
    """The examples of ``part`` (a new list; example ids are unchanged)."""
    start, end = part_bounds(len(examples), part)
    return examples[start:end]


def part_of(examples: list[Any], text: str | None) -> tuple[list[Any], dict[str, Any]]:
    """``(examples of part text, run.json additions)``; ``(examples, {})`` without a part.

    Every example must carry its own id: a part's rows are matched to the other parts' by
    id, and a position-based fallback id would restart at 0 in every part.
    """
    if not text:
        return examples, {}
    part = parse_part(text)
    chosen = part_slice(examples, part)
    ids = [getattr(ex, "id", None) for ex in chosen]
    if any(i in (None, "") for i in ids):
        raise ConfigError(f"--part {part}: these examples have no ids, so parts could not be "
                          "merged", hint="evaluate a data set whose examples carry ids")
    # the fingerprint of the *whole* data set, equal in every part made from the same data
    return chosen, {"part": str(part), "part_ids": [str(i) for i in ids],
                    **data_fingerprint(examples)}
