"""Stop a reply that has fallen into a repetition loop, and keep one copy of what looped.

Why: at greedy decoding the 1.5B sometimes repeats one sentence (or a short run of sentences)
until the output cap -- "The current sheriff is the elected official who is responsible for
law enforcement in Maricopa County." ten times, "The long answer is:" forty times -- and every
copy after the first is paid in decode time and read by the metrics as part of the answer
(8 of 60 zero-shot Diva long answers on ASQA dev, `python -m benchmarks.signature_budget`).

The rule: split the reply into units (a sentence ending in ``.``, ``!``, ``?`` or ``:``, or a
line), a unit counting once the text after it has begun; when the last ``REPEATS`` blocks of
``1..MAX_PERIOD`` units are the same block (compared lower-case, spaces folded, 3+ words in the
block, no list item in it), the reply is looping: it is cut after the block's first copy.
Three copies, not two, because a sentence said twice in a row is sometimes a model that then
moves on. List items are left alone: a list field that names one item three times is a
degenerate reply the adapter already sends back to DSPy for a second try (measured better).

Two places apply the same rule, so a reply is the same whichever of them saw it first:

* the embedded engine watches the reply as llama.cpp writes it (:class:`LoopWatch`) and stops
  generation at the third copy -- the tokens that would have followed are never decoded;
* the ChatAdapter cuts a finished reply with :func:`cut_loop` before parsing it, for replies
  from an endpoint, and for replies stored in the response cache before the guard existed.

Decoding runs left to right, so the guarded reply is a prefix of the reply the same decoding
would have written unguarded (exactly at temperature 0; with sampling, for the same random
draws -- Diva samples at the paper's 0.3), and the cut is decided at the first unit that
completes a loop, so ``cut_loop(unguarded) == guarded``: a cached unguarded reply replays as
the guarded run would have written it.
``AMBIQA_LOOP_GUARD=0`` switches both off (the embedded LM's cache identity then says so).
"""

from __future__ import annotations

import os
import re

#: copies of a block that make a loop
REPEATS = 3
#: longest block, in units, that is checked for repetition
MAX_PERIOD = 3
#: a block shorter than this (in words) may repeat honestly ("Yes." "No.")
MIN_WORDS = 3

# a unit: up to and including a sentence end (. ! ? :) that is followed by white space, or up
# to a line break; the lookahead keeps "3.5" and "U.S.A" inside one unit
_UNIT_END = re.compile(r"[.!?:](?=\s)|\n")


def guard_enabled() -> bool:
    """Whether the loop guard is on (``$AMBIQA_LOOP_GUARD``, default on)."""
    return os.environ.get("AMBIQA_LOOP_GUARD", "1").strip().lower() not in ("0", "false", "no",
                                                                            "off")


#: a list item ("- ", "* ", "• ", "1. ", "2) "): lists are left to the adapter, which reads a
#: list that repeats an item as a degenerate reply and lets DSPy ask again (ambiqa.lm.adapter)
_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d{1,3}[.)])\s")


def _norm(unit: str) -> str:
    return " ".join(unit.lower().split())


def _complete_units(text: str, final: bool) -> list[tuple[str, int]]:
    """``(normalised unit, end offset)`` for each complete unit of ``text``; the trailing
    partial unit counts only when ``final`` (the reply has ended)."""
    units: list[tuple[str, int]] = []
    start = 0
    for m in _UNIT_END.finditer(text):
        norm = _norm(text[start:m.end()])
        if norm:
            units.append((norm, m.end()))
        start = m.end()
    if final:
        norm = _norm(text[start:])
        if norm:
            units.append((norm, len(text)))
    return units


def _loop_ending_at(units: list[tuple[str, int]], last: int) -> int | None:
    """The offset to cut at when unit ``last`` completes a loop, else None."""
    for period in range(1, MAX_PERIOD + 1):
        first = last + 1 - REPEATS * period
        if first < 0:
            break
        block = [u for u, _ in units[first:first + period]]
        if sum(len(u.split()) for u in block) < MIN_WORDS or any(
                _LIST_ITEM.match(u) for u in block):
            continue
        if all([u for u, _ in units[first + k * period:first + (k + 1) * period]] == block
               for k in range(1, REPEATS)):
            return units[first + period - 1][1]
    return None


def cut_loop(text: str) -> str | None:
    """``text`` cut after the first copy of the first loop to complete, or None if it has
    none. Idempotent: a cut reply has no loop left."""
    units = _complete_units(text, final=True)
    for last in range(len(units)):
        cut = _loop_ending_at(units, last)
        if cut is not None:
            return text[:cut].rstrip()
    return None


class LoopWatch:
    """Fed a reply piece by piece, says when it has completed a loop (see module)."""

    def __init__(self) -> None:
        self.text = ""
        self._seen = 0  # complete units already checked
        self.cut: str | None = None

    def feed(self, piece: str) -> bool:
        """Add ``piece``; True once the reply loops (then :attr:`cut` holds the kept text)."""
        if self.cut is not None:
            return True
        self.text += piece
        units = _complete_units(self.text, final=False)
        for last in range(self._seen, len(units)):
            offset = _loop_ending_at(units, last)
            if offset is not None:
                self.cut = self.text[:offset].rstrip()
                return True
        self._seen = len(units)
        return False
