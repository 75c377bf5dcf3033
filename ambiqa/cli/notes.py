"""DSPy's warnings, folded into ambiqa's own one-line notes.

DSPy logs a paragraph per event ("LM response was truncated due to exceeding max_tokens=...
You can inspect ... consider increasing the temperature ..."), once per LM call, into the
middle of a command's output (between an answer's lines, through a progress bar). While
:func:`folded_dspy_warnings` is active -- for the whole of every command but ``serve``, in
``ambiqa.cli.main`` -- a filter on the handlers of DSPy's ``dspy`` logger counts those
warnings instead of printing them; at the end one line per kind goes to stderr:

    ambiqa: note: 2 LM replies were cut off at their token limit (DSPy: "LM response was
    truncated"); answers built on them may be incomplete

Errors and DSPy's info messages pass through untouched, and so does everything once the
block ends (the filter is removed).
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

#: the start of DSPy's truncation warning (dspy.clients.lm.LM._check_truncation)
TRUNCATED = "LM response was truncated"

#: commands whose DSPy warnings are logged as they come, not folded: a server runs for hours
LIVE_WARNINGS = frozenset({"serve"})


class DspyWarningFold(logging.Filter):
    """Counts DSPy's WARNING records (truncations apart) and stops them from printing."""

    def __init__(self) -> None:
        super().__init__("dspy")
        self.truncated = 0
        self.other: Counter[str] = Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or not record.name.startswith("dspy"):
            return True
        if getattr(record, "ambiqa_folded", False):  # seen by another of the logger's handlers
            return False
        record.ambiqa_folded = True
        message = record.getMessage()
        if message.startswith(TRUNCATED):
            self.truncated += 1
        else:
            self.other[_first_sentence(message)] += 1
        return False

    def lines(self) -> list[str]:
        """The notes: one for truncations, one per other kind of DSPy warning."""
        out = []
        if self.truncated:
            replies = "reply was cut off at its" if self.truncated == 1 else \
                "replies were cut off at their"
            out.append(f"ambiqa: note: {self.truncated} LM {replies} token limit (DSPy: "
                       f"\"{TRUNCATED}\"); answers built on them may be incomplete")
        for text, n in self.other.items():
            out.append(f"ambiqa: note: DSPy warned{f' {n} times' if n > 1 else ''}: {text}")
        return out


def _first_sentence(message: str, limit: int = 160) -> str:
    line = message.strip().splitlines()[0] if message.strip() else "(empty warning)"
    end = line.find(". ")
    text = line[: end + 1] if end > 0 else line
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextmanager
def folded_dspy_warnings(stream: TextIO | None = None) -> Iterator[DspyWarningFold]:
    """Fold DSPy's warnings logged inside the block into notes written to ``stream``
    (default stderr) when it ends, also when it ends with an exception."""
    import dspy  # noqa: F401  (its import installs the "dspy" logger's handler)

    fold = DspyWarningFold()
    handlers = list(logging.getLogger("dspy").handlers)
    for handler in handlers:
        handler.addFilter(fold)
    try:
        yield fold
    finally:
        for handler in handlers:
            handler.removeFilter(fold)
        for line in fold.lines():
            print(line, file=stream or sys.stderr)
