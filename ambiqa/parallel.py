"""Run independent calls concurrently without losing DSPy settings or cost tracing.

DSPy keeps per-call overrides (``dspy.context``) and ambiqa keeps its active cost traces in
context variables; plain threads start with an empty context. ``run_parallel`` copies the
caller's context into each task, so LM calls made by workers are charged to the caller's trace
and use the caller's LM.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

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
