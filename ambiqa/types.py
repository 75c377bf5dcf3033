"""Small value types shared by every layer (data, retrieval, programs).

They sit below all other modules so the one-way import rule holds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Passage:
    """One retrievable passage. ``score`` is the retriever's score (higher is better)."""

    id: str
    title: str
    text: str
    score: float = 0.0

    def with_score(self, score: float) -> Passage:
        return Passage(self.id, self.title, self.text, float(score))

    def render(self) -> str:
        """The form a passage takes inside a prompt: title line, then text."""
        return f"{self.title}\n{self.text}" if self.title else self.text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Interpretation:
    """One disambiguated reading of a question with its answer and cited passage ids."""

    question: str
    answer: str
    passages: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SharedResource:
    """Mixin for heavy read-only objects (retrievers, encoders) held by programs.

    DSPy teleprompters deep-copy programs many times; a deep copy of a ColBERT index or a
    sentence encoder would cost gigabytes and change nothing, so copies share the original.
    """

    def __deepcopy__(self, memo: dict) -> SharedResource:
        return self
