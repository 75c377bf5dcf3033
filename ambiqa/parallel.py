"""Run independent calls concurrently, or under a deadline, without losing DSPy settings or
cost tracing.

DSPy keeps per-call overrides (``dspy.context``) and ambiqa keeps its active cost traces in
context variables; plain threads start with an empty context. ``run_parallel`` and
``call_with_deadline`` copy the caller's context into each task, so LM calls made by workers
are charged to the caller's trace and use the caller's LM.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ambiqa.envutil import env_int

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """Concurrency for independent LM calls (``$AMBIQA_PARALLEL``, default 4).

    The embedded model serializes requests anyway; an endpoint that batches (vLLM) gains.
    """
    return env_int("AMBIQA_PARALLEL", 4, minimum=1)


def run_parallel(fn: Callable[[T], R], items: Sequence[T], max_workers: int | None = None,
                 ) -> list[R]:
    """``[fn(x) for x in items]``, concurrently, in order. Exceptions propagate to the caller."""
    items = list(items)
    workers = min(max_workers or default_workers(), len(items))
    if workers <= 1:
        return [fn(x) for x in items]
    contexts = [contextvars.copy_context() for _ in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ambiqa") as pool:
        futures = [pool.submit(ctx.run, fn, x) for ctx, x in zip(contexts, items, strict=True)]
        return [f.result() for f in futures]


def call_with_deadline(fn: Callable[[], R], timeout_s: float | None, *,
                       error: Callable[[float], BaseException],
                       thread_name: str = "ambiqa-deadline") -> R:
    """``fn()``, but give up after ``timeout_s`` seconds (``None`` or 0: wait for ever).

    ``fn`` runs in a daemon thread carrying a copy of the caller's context. On timeout
    ``error(timeout_s)`` is raised and the thread is abandoned, not killed (Python cannot kill
    threads): whatever it records later is ignored. A daemon thread, not an executor, so an
    abandoned call never keeps the interpreter from exiting. ``fn``'s own exception is
    re-raised as it came. Serves the LM's per-attempt deadline and the evaluation runner's
    per-example deadline.
    """
    if not timeout_s:
        return fn()
    ctx = contextvars.copy_context()
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = ctx.run(fn)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, daemon=True, name=thread_name).start()
    if not done.wait(timeout_s):
        raise error(timeout_s)
    if "error" in box:
        raise box["error"]
    return box["value"]
