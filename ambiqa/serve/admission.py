"""Admission control for the answer endpoint: bounded concurrency, a bounded queue, deadlines.

Why: a compiled program is as fast as the LM behind it, and the LM serves a fixed number of
calls at once (the embedded model's slots, an endpoint's capacity). Admitting more requests
than that only makes every one of them slower; admitting unboundedly many makes the process run
out of memory and threads. So a request takes one of ``slots`` run slots, or waits in a queue
of at most ``queue`` places; a request that finds the queue full is refused at once (503 with a
``Retry-After`` estimated from recent service times), and a request that has waited and run for
longer than its deadline is answered 504.

A slot is held until the program call really finishes, also when the client was already told
504: Python cannot stop a running thread, and releasing its slot early would let more calls
reach the LM than it has slots for.

Admission is exact, from the first request: a request is let in only while the requests
already in (``running`` + ``waiting``) are fewer than ``slots + queue``, and that place is
taken synchronously, before the handler's next ``await``. (Issue 42: the check used to read
``running``, which counts a request only once its coroutine resumes after the semaphore
granted it a slot; in a burst -- 50 requests reaching the handler in the same few event-loop
turns, as on a cold server whose first call held the GIL -- every request saw ``running`` below
``slots`` and was admitted: 39 of 50 with 2 slots and a queue of 4.)
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


class QueueFull(Exception):
    """Every slot is busy and the queue is full; ``retry_after_s`` says when to try again."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"server busy; retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class DeadlineExceeded(Exception):
    """The request waited and ran longer than its deadline."""

    def __init__(self, timeout_s: float, stage: str) -> None:
        super().__init__(f"no answer within {timeout_s:g} s ({stage})")
        self.timeout_s = timeout_s
        self.stage = stage


@dataclass
class Admission:
    """``slots`` concurrent program calls, at most ``queue`` more waiting for one.

    Counters (``running``, ``waiting``, ``served``, ``refused``, ``timed_out``) are read by
    ``/readyz`` and by tests; all mutation happens on the event loop thread, so no lock.
    """

    slots: int
    queue: int
    timeout_s: float
    running: int = 0
    waiting: int = 0
    served: int = 0
    refused: int = 0
    timed_out: int = 0
    #: exponentially weighted mean seconds per finished call, for ``Retry-After``
    mean_service_s: float = 1.0
    _sem: asyncio.Semaphore | None = field(default=None, repr=False)
    _pending: set[asyncio.Future] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError("slots must be >= 1")
        if self.queue < 0:
            raise ValueError("queue must be >= 0")
        if not self.timeout_s > 0:
            raise ValueError("timeout_s must be > 0")

    @property
    def sem(self) -> asyncio.Semaphore:
        # made lazily so it binds to the loop that serves requests
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.slots)
        return self._sem

    def retry_after(self) -> int:
        """Whole seconds until a queue place is likely free: the queue ahead drains at
        ``slots`` calls per mean service time."""
        ahead = self.waiting + 1
        return max(1, math.ceil(self.mean_service_s * ahead / self.slots))

    def _note(self, seconds: float) -> None:
        self.mean_service_s = 0.8 * self.mean_service_s + 0.2 * seconds
        self.served += 1

    def _give_back_if_acquired(self, acquire: asyncio.Future[Any]) -> None:
        if not acquire.cancelled() and acquire.exception() is None:
            self.sem.release()

    @property
    def admitted(self) -> int:
        """Requests in: running (abandoned calls included) or waiting for a slot."""
        return self.running + self.waiting

    def reserve(self) -> Place:
        """Take a place for one request now, or raise :class:`QueueFull`.

        Synchronous on purpose: between this check and the request being counted there is no
        ``await``, so no other request can pass the same check in between. ``run(place=...)``
        uses the place; a place that is never run must be given back with
        :meth:`Place.release`.
        """
        if self.admitted >= self.slots + self.queue:
            self.refused += 1
            raise QueueFull(self.retry_after())
        self.waiting += 1
        return Place(self)

    async def run(self, make_call: Callable[[], Awaitable[T]], *,
                  place: Place | None = None) -> T:
        """Run ``make_call()`` in a slot, within the deadline; raise :class:`QueueFull` or
        :class:`DeadlineExceeded`. Exceptions of the call itself propagate unchanged.

        ``place``: one taken with :meth:`reserve` (a caller that must refuse before it
        answers, as the stream does); without it a place is taken here, before any await."""
        start = time.perf_counter()
        place = place if place is not None else self.reserve()
        place.taken = True  # from here on this coroutine gives the place back (finally below)
        # not asyncio.wait_for: on 3.11 a timeout racing a successful acquire can lose a permit
        acquire = asyncio.ensure_future(self.sem.acquire())
        try:
            done, _ = await asyncio.wait({acquire}, timeout=self.timeout_s)
        except asyncio.CancelledError:  # the client went away while queued
            acquire.cancel()
            acquire.add_done_callback(self._give_back_if_acquired)
            raise
        finally:
            self.waiting -= 1
        if not done:
            acquire.cancel()
            acquire.add_done_callback(self._give_back_if_acquired)
            self.timed_out += 1
            raise DeadlineExceeded(self.timeout_s, "waiting for a free slot")
        self.running += 1
        began = time.perf_counter()
        task: asyncio.Future[Any] = asyncio.ensure_future(make_call())
        self._pending.add(task)

        def _release(t: asyncio.Future[Any]) -> None:
            self._pending.discard(t)
            self.running -= 1
            self.sem.release()
            self._note(time.perf_counter() - began)
            if not t.cancelled():
                t.exception()  # retrieved, so an abandoned call's error is not logged as lost

        task.add_done_callback(_release)
        left = self.timeout_s - (began - start)
        done, _ = await asyncio.wait({task}, timeout=max(left, 0.0))
        if not done:
            self.timed_out += 1
            raise DeadlineExceeded(self.timeout_s, "the program was still running")
        return task.result()

    async def drain(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for calls still running (abandoned after a 504 included);
        return how many were left unfinished."""
        if not self._pending:
            return 0
        _, left = await asyncio.wait(set(self._pending), timeout=timeout_s)
        return len(left)


class Place:
    """A request's place in :class:`Admission` (counted in ``waiting`` until it runs)."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        #: set once :meth:`Admission.run` owns the place (it gives it back itself)
        self.taken = False
        self._released = False

    def release(self) -> None:
        """Give back a place that :meth:`Admission.run` never took (its task was cancelled
        before it started, or the caller gave up); a no-op otherwise, so it is safe to call
        from a done callback whatever happened."""
        if self.taken or self._released:
            return
        self._released = True
        self.admission.waiting -= 1
