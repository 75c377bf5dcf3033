"""LM-call budgets for compiling and tuning (``--max-lm-calls``).

A :class:`Budget` counts the LM calls made inside its ``watch()`` block through
:mod:`ambiqa.tracing` (every ``dspy.LM`` call, whatever the engine). Optimizers check it at
safe points -- between training examples while bootstrapping, between candidates of a random
search, between held-out examples of a tuning trial -- and stop there, keeping what they have.
So a run stops *cleanly*: no LM call is cut off, and the overshoot is at most the calls of
the one example (one program call and its scoring) in flight when the limit was reached.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from ambiqa.checks import check_int
from ambiqa.tracing import CostTrace, track


class BudgetExhausted(Exception):
    """Raised at a safe point when the LM-call budget is spent (caught by the optimizers)."""


class Budget:
    """At most ``max_lm_calls`` LM calls inside :meth:`watch` (None: unlimited)."""

    def __init__(self, max_lm_calls: int | None = None) -> None:
        check_int("--max-lm-calls", max_lm_calls, 0, none_ok=True)
        self.max_lm_calls = max_lm_calls
        self._trace: CostTrace | None = None
        self.stopped = False

    @contextlib.contextmanager
    def watch(self) -> Iterator[Budget]:
        with track() as trace:
            self._trace = trace
            yield self

    @property
    def spent(self) -> int:
        return self._trace.lm_calls if self._trace is not None else 0

    @property
    def exhausted(self) -> bool:
        return self.max_lm_calls is not None and self.spent >= self.max_lm_calls

    def check(self) -> None:
        if self.exhausted:
            self.stopped = True
            raise BudgetExhausted(f"LM-call budget of {self.max_lm_calls} spent")

    def iterate(self, items: Iterable[Any]) -> list[Any]:
        """A list that stops yielding once the budget is spent (for DSPy's bootstrap loop,
        which walks its trainset with a plain ``for``)."""
        return _BudgetedList(items, self)


class _BudgetedList(list):
    def __init__(self, items: Iterable[Any], budget: Budget) -> None:
        super().__init__(items)
        self._budget = budget

    def __iter__(self) -> Iterator[Any]:
        for item in list.__iter__(self):
            if self._budget.exhausted:
                self._budget.stopped = True
                return
            yield item

    def __deepcopy__(self, memo: dict) -> _BudgetedList:
        return self


def unlimited() -> Budget:
    return Budget(None)
