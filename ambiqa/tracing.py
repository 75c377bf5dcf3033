"""Cost accounting: one place that records every LM and retriever call.

Why a single recorder: the papers compare methods by LM calls, tokens and retrieval calls as
much as by quality (Diva Fig. 1, ToC's cost discussion), so every program must report them the
same way, whatever the LM backend. Records flow like this:

* a DSPy callback (:class:`TraceCallback`) sees every ``dspy.LM`` call, whichever engine
  serves it, and records tokens, latency, finish reason and the signature of the predictor
  that made the call. :func:`ambiqa.lm.configure` installs it; a program called under a plain
  ``dspy.configure(lm=...)`` adds it for the length of the call (:func:`ensure_tracing`),
  always *beside* the callbacks the user installed (MLflow, Langfuse...), never instead;
* retrievers call :func:`record_retrieval` for every search;
* programs mark degraded steps with :func:`record_event`;
* the LM layer and the passage formatting count what they cut (output caps, passage budgets)
  and the callback counts replies the adapter could not parse (each one makes DSPy retry the
  call in JSON), so no truncation or format retry is silent.

Prompt tokens are split into those the LM computed and those its prompt cache skipped
(llama.cpp's ``timings``: ``prompt_n`` computed, ``cache_n`` reused; an endpoint's
``prompt_tokens_details.cached_tokens``): on a CPU, computed prompt tokens are the cost.

``with track() as t:`` collects every record made inside the block (and in worker threads
started through :func:`ambiqa.parallel.run_parallel`, which copies the context), so a program
call, an evaluation of one example or a whole compile can each be totalled.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from dspy.utils.callback import BaseCallback


@dataclass
class CallRecord:
    """One LM call, retriever call or degradation event."""

    kind: str  # "lm" | "retrieval" | "compute" | "event" | "parse" | "budget"
    module: str = ""
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    #: prompt tokens the LM's prompt cache reused (not computed); input_tokens - cached_tokens
    #: is what was computed
    cached_tokens: int = 0
    #: the output cap applied to this call (0: none)
    max_tokens: int = 0
    latency_s: float = 0.0
    finish_reason: str = ""
    start: float = 0.0
    end: float = 0.0
    error: str = ""
    detail: str = ""
    #: the reply came from DSPy's response cache: no LM was asked (a dead endpoint would not
    #: show), so rows, summaries, reports and served answers count these calls apart
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def union_length(spans: list[tuple[float, float]]) -> float:
    """Total length covered by time intervals, overlaps counted once."""
    total, cur_start, cur_end = 0.0, 0.0, None
    for s, e in sorted(spans):
        if cur_end is None or s > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = s, e
        else:
            cur_end = max(cur_end, e)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


@dataclass
class CostTrace:
    """The records of one block of work, with totals.

    ``critical_path_s`` is the length of the union of call intervals: with perfectly concurrent
    independent calls it approaches the longest chain, with sequential calls it equals the sum.
    """

    records: list[CallRecord] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    finished: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, record: CallRecord) -> None:
        with self._lock:
            self.records.append(record)

    # ---- totals -------------------------------------------------------------------------
    @property
    def lm_calls(self) -> int:
        return sum(1 for r in self.records if r.kind == "lm")

    @property
    def input_tokens(self) -> int:
        return sum(r.input_tokens for r in self.records if r.kind == "lm")

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.records if r.kind == "lm")

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the LM's prompt cache."""
        return sum(r.cached_tokens for r in self.records if r.kind == "lm")

    @property
    def computed_tokens(self) -> int:
        """Prompt tokens the LM actually computed (prompt minus cached)."""
        return sum(max(r.input_tokens - r.cached_tokens, 0)
                   for r in self.records if r.kind == "lm")

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def cached_calls(self) -> int:
        """LM calls answered from DSPy's response cache (no LM was asked; see
        :class:`UsageTap`): an answer built from them says nothing about the LM now."""
        return sum(1 for r in self.records if r.kind == "lm" and r.cached)

    @property
    def format_retries(self) -> int:
        """Replies the adapter could not parse. A failed ChatAdapter parse makes DSPy repeat
        the call with its JSON adapter (a second full LM call); a failed JSON parse is final."""
        return sum(1 for r in self.records if r.kind == "parse")

    @property
    def passages_cut(self) -> int:
        """Passages shortened to the per-passage word budget before entering a prompt."""
        return sum(1 for r in self.records if r.kind == "budget")

    @property
    def loops_cut(self) -> int:
        """Replies cut at a repetition loop: stopped live by the engine (finish reason
        ``loop``) or cut when parsed (a reply stored before the guard, or an endpoint's)."""
        return sum(1 for r in self.records if r.kind == "loop" or (
            r.kind == "lm" and r.finish_reason == "loop"))

    @property
    def retriever_calls(self) -> int:
        return sum(1 for r in self.records if r.kind == "retrieval")

    @property
    def truncated_calls(self) -> int:
        """LM replies cut at max_tokens; DSPy accepts them silently, so count them here."""
        return sum(1 for r in self.records if r.kind == "lm" and r.finish_reason == "length")

    @property
    def lm_errors(self) -> int:
        return sum(1 for r in self.records if r.kind == "lm" and r.error)

    @property
    def events(self) -> list[str]:
        return [f"{r.module}: {r.detail}" for r in self.records if r.kind == "event"]

    @property
    def lm_latency_s(self) -> float:
        return sum(r.latency_s for r in self.records if r.kind == "lm")

    @property
    def compute_s(self) -> float:
        return sum(r.latency_s for r in self.records if r.kind == "compute")

    @property
    def wall_s(self) -> float:
        end = self.finished if self.finished is not None else time.perf_counter()
        return end - self.started

    @property
    def critical_path_s(self) -> float:
        return union_length([(r.start, r.end) for r in self.records
                             if r.kind in ("lm", "retrieval", "compute") and r.end > 0])

    def by_signature(self) -> dict[str, dict[str, int]]:
        """Per signature: calls, prompt / computed / output tokens, the longest single reply
        (``max_output_tokens``: what an output cap must cover, which the per-question sum
        hides when a signature is called several times), truncations, parse failures --
        where a program's cost goes and which prompts fail their format."""
        out: dict[str, dict[str, int]] = {}
        for r in self.records:
            if r.kind not in ("lm", "parse"):
                continue
            row = out.setdefault(r.module or "direct", {
                "calls": 0, "input_tokens": 0, "computed_tokens": 0, "output_tokens": 0,
                "max_output_tokens": 0, "truncated": 0, "parse_failures": 0})
            if r.kind == "parse":
                row["parse_failures"] += 1
                continue
            row["calls"] += 1
            row["input_tokens"] += r.input_tokens
            row["computed_tokens"] += max(r.input_tokens - r.cached_tokens, 0)
            row["output_tokens"] += r.output_tokens
            row["max_output_tokens"] = max(row["max_output_tokens"], r.output_tokens)
            row["truncated"] += r.finish_reason == "length"
        return out

    def by_module(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.records:
            if r.kind == "lm":
                counts[r.module] = counts.get(r.module, 0) + 1
        return counts

    def summary(self) -> dict[str, Any]:
        return {
            "lm_calls": self.lm_calls,
            "cached_calls": self.cached_calls,
            "input_tokens": self.input_tokens,
            "computed_tokens": self.computed_tokens,
            "cached_tokens": self.cached_tokens,
            "output_tokens": self.output_tokens,
            "retriever_calls": self.retriever_calls,
            "truncated_calls": self.truncated_calls,
            "format_retries": self.format_retries,
            "passages_cut": self.passages_cut,
            "loops_cut": self.loops_cut,
            "lm_errors": self.lm_errors,
            "lm_latency_s": round(self.lm_latency_s, 3),
            "encoder_s": round(self.compute_s, 3),
            "wall_s": round(self.wall_s, 3),
            "critical_path_s": round(self.critical_path_s, 3),
            "calls_by_module": self.by_module(),
            "by_signature": self.by_signature(),
            "events": self.events,
        }


# Active traces form a stack so nested blocks (a compile containing many program calls) each
# see their own records.
_ACTIVE: contextvars.ContextVar[tuple[CostTrace, ...]] = contextvars.ContextVar(
    "ambiqa_active_traces", default=()
)
# The signature name of the predictor currently running, set by TraceCallback.
_MODULE: contextvars.ContextVar[str] = contextvars.ContextVar("ambiqa_module", default="")
# The output cap (``output_cap_tokens``) its signature class states, set beside it; the LM
# engine applies it (ambiqa.lm.resilience), so the LM layer never imports the signatures.
_OUTPUT_CAP: contextvars.ContextVar[int | None] = contextvars.ContextVar("ambiqa_output_cap",
                                                                         default=None)
# The predictor itself (the ``dspy.Predict`` running), set beside them: a stream of LM text
# is tagged with it, so a program can tell its answer writer's text from its other calls.
_PREDICTOR: contextvars.ContextVar[Any] = contextvars.ContextVar("ambiqa_predictor",
                                                                 default=None)


@contextlib.contextmanager
def track() -> Iterator[CostTrace]:
    """Collect every call record made inside the block into a fresh :class:`CostTrace`."""
    trace = CostTrace()
    token = _ACTIVE.set(_ACTIVE.get() + (trace,))
    try:
        yield trace
    finally:
        trace.finished = time.perf_counter()
        _ACTIVE.reset(token)


def _emit(record: CallRecord) -> None:
    for trace in _ACTIVE.get():
        trace.add(record)


def current_module() -> str:
    return _MODULE.get()


def current_predictor() -> Any:
    """The ``dspy.Predict`` whose call is running in this context (None: none)."""
    return _PREDICTOR.get()


def current_output_cap() -> int | None:
    """The output cap the running predictor's signature states (None: none, or no predictor)."""
    return _OUTPUT_CAP.get()


@contextlib.contextmanager
def module_scope(name: str) -> Iterator[None]:
    token = _MODULE.set(name)
    try:
        yield
    finally:
        _MODULE.reset(token)


def record_retrieval(retriever: str, query: str, k: int, start: float, end: float) -> None:
    _emit(CallRecord(kind="retrieval", module=retriever, latency_s=end - start, start=start,
                     end=end, detail=f"k={k} q={query[:80]!r}"))


def record_compute(module: str, start: float, end: float, detail: str = "") -> None:
    """Record local compute on the critical path (sentence-encoder batches), so critical-path
    time counts the work a program really waits for, not only LM and retriever calls."""
    _emit(CallRecord(kind="compute", module=module, latency_s=end - start, start=start, end=end,
                     detail=detail))


def _redact(text: str) -> str:
    from ambiqa.lm.redact import redact  # the LM package imports this module

    return redact(text)


def record_event(module: str, detail: str) -> None:
    """Record a degradation (a step that failed and fell back) so reports can count it.
    Credentials (URL passwords, known key values) are redacted: events reach results.jsonl,
    reports and served answers, and an endpoint may echo its key in an error."""
    now = time.perf_counter()
    _emit(CallRecord(kind="event", module=module, detail=_redact(detail), start=now, end=now))


def record_budget_cut(module: str, detail: str) -> None:
    """Record that a passage was shortened to the word budget before entering a prompt."""
    now = time.perf_counter()
    _emit(CallRecord(kind="budget", module=module or current_module() or "passages",
                     detail=detail, start=now, end=now))


def record_loop_cut(module: str) -> None:
    """Record that a reply stuck in a repetition loop was cut to its first copy when parsed
    (:mod:`ambiqa.lm.loop_guard`; a reply the engine stopped live carries finish reason
    ``loop`` instead)."""
    now = time.perf_counter()
    _emit(CallRecord(kind="loop", module=module, start=now, end=now))


def record_lm_call(record: CallRecord) -> None:
    _emit(record)


_LAST = threading.local()


def note_finish_reason(reason: str) -> None:
    """Engines that know the finish reason (ours does) leave it here for the callback."""
    _LAST.finish = reason


class UsageTap:
    """Stands in DSPy's ``usage_tracker`` slot to see each call's token usage.

    DSPy reports usage to ``settings.usage_tracker.add_usage(model, usage)`` in the calling
    thread right before the LM call returns (and not at all for cache hits, which cost
    nothing); the tap parks it in a thread-local that :meth:`TraceCallback.on_lm_end` reads.
    That silence is also how a cache hit is told apart: a call that succeeded while a tap
    was installed but never reported usage was answered by the response cache, whatever
    engine the LM has (ambiqa's, LiteLLM's, a user's), so it is marked ``cached``.
    """

    def __init__(self, inner: Any = None) -> None:
        #: a usage tracker the user installed (``dspy.track_usage``): it still gets every usage
        self.inner = inner

    def add_usage(self, model: str, usage: dict[str, Any]) -> None:
        if self.inner is not None:
            self.inner.add_usage(model, usage)
        usage = dict(usage or {})
        tin = usage.get("prompt_tokens", usage.get("input_tokens", 0)) or 0
        tout = usage.get("completion_tokens", usage.get("output_tokens", 0)) or 0
        details = usage.get("prompt_tokens_details") or {}
        cached = (details.get("cached_tokens") if isinstance(details, dict) else 0) or 0
        _LAST.usage = (int(tin), int(tout), min(int(cached), int(tin)))
        _LAST.reported = True

    def __deepcopy__(self, memo: dict) -> UsageTap:  # DSPy's parallelizer deep-copies trackers
        return self

    def __getattr__(self, attr: str) -> Any:  # the user's tracker's own API (get_total_tokens)
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(attr)
        return getattr(inner, attr)


def note_max_tokens(cap: int) -> None:
    """The LM layer leaves the output cap it applied here for the callback."""
    _LAST.cap = int(cap or 0)


def _take_last() -> tuple[int, int, int, str, int, bool]:
    tin, tout, cached = getattr(_LAST, "usage", (0, 0, 0))
    finish = getattr(_LAST, "finish", "")
    cap = getattr(_LAST, "cap", 0)
    reported = getattr(_LAST, "reported", False)
    _LAST.usage, _LAST.finish, _LAST.cap, _LAST.reported = (0, 0, 0), "", 0, False
    return tin, tout, cached, finish, cap, reported


def _tap_installed() -> bool:
    import dspy

    return isinstance(dspy.settings.get("usage_tracker"), UsageTap)


class TraceCallback(BaseCallback):
    """DSPy callback that feeds :mod:`ambiqa.tracing` from every predictor and LM call."""

    def __init__(self) -> None:
        self._starts: dict[str, tuple[float, str]] = {}
        self._module_tokens: dict[str, tuple[contextvars.Token, ...]] = {}
        self._lock = threading.Lock()

    # predictor scope ------------------------------------------------------------------------
    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        signature = getattr(instance, "signature", None)
        if signature is not None and hasattr(instance, "demos"):
            token = _MODULE.set(getattr(signature, "__name__", type(instance).__name__))
            cap = getattr(signature, "output_cap_tokens", None)
            cap_token = _OUTPUT_CAP.set(cap if isinstance(cap, int) and cap > 0 else None)
            predictor_token = _PREDICTOR.set(instance)
            with self._lock:
                self._module_tokens[call_id] = (token, cap_token, predictor_token)

    def on_module_end(self, call_id: str, outputs: Any, exception: BaseException | None = None):
        with self._lock:
            tokens = self._module_tokens.pop(call_id, None)
        if tokens is not None:
            try:
                _PREDICTOR.reset(tokens[2])
                _OUTPUT_CAP.reset(tokens[1])
                _MODULE.reset(tokens[0])
            except ValueError:  # reset from another context: nothing to undo there
                pass

    # LM calls -------------------------------------------------------------------------------
    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        _take_last()
        with self._lock:
            self._starts[call_id] = (time.perf_counter(), getattr(instance, "model", ""))

    def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None):
        end = time.perf_counter()
        with self._lock:
            start, model = self._starts.pop(call_id, (end, ""))
        tin, tout, cached, finish, cap, reported = _take_last()
        # DSPy skips the usage report only for a response-cache hit (see UsageTap)
        from_cache = exception is None and not reported and _tap_installed()
        record_lm_call(CallRecord(
            kind="lm", module=_MODULE.get() or "direct", model=str(model), input_tokens=tin,
            output_tokens=tout, cached_tokens=cached, max_tokens=cap, latency_s=end - start,
            finish_reason=finish, start=start, end=end,
            error=type(exception).__name__ if exception is not None else "",
            cached=from_cache,
        ))

    # adapter parses -------------------------------------------------------------------------
    def on_adapter_parse_start(self, call_id: str, instance: Any, inputs: dict[str, Any]):
        with self._lock:
            self._starts[call_id] = (time.perf_counter(), type(instance).__name__)

    def on_adapter_parse_end(self, call_id: str, outputs: Any,
                             exception: BaseException | None = None):
        with self._lock:
            start, adapter = self._starts.pop(call_id, (time.perf_counter(), ""))
        if exception is None:
            return
        now = time.perf_counter()
        record_lm_call(CallRecord(
            kind="parse", module=_MODULE.get() or "direct", error=type(exception).__name__,
            detail=f"{adapter} could not parse the reply: {_redact(str(exception))[:160]}",
            start=now, end=now))


_DEFAULT_CALLBACK: TraceCallback | None = None
_DEFAULT_LOCK = threading.Lock()


def default_callback() -> TraceCallback:
    """The process-wide :class:`TraceCallback` (one instance, so records are never doubled)."""
    global _DEFAULT_CALLBACK
    with _DEFAULT_LOCK:
        if _DEFAULT_CALLBACK is None:
            _DEFAULT_CALLBACK = TraceCallback()
        return _DEFAULT_CALLBACK


def tracing_installed() -> bool:
    """Whether DSPy's current settings already carry a :class:`TraceCallback` and tap."""
    import dspy

    callbacks = dspy.settings.get("callbacks") or []
    return (any(isinstance(cb, TraceCallback) for cb in callbacks)
            and isinstance(dspy.settings.get("usage_tracker"), UsageTap))


def traced(callbacks: list[Any] | None = None, usage_tracker: Any = None) -> dict[str, Any]:
    """DSPy settings that carry ambiqa's cost tracing: ``callbacks`` plus the process-wide
    :func:`default_callback` (added once, never instead of the user's MLflow or Langfuse
    callbacks), and a :class:`UsageTap` in the ``usage_tracker`` slot that forwards every
    usage to ``usage_tracker`` (the user's own, if any; a tap already there is kept).

    Why one function: :func:`ambiqa.lm.configure` (``dspy.configure``), :func:`ensure_tracing`
    (a ``dspy.context`` around a call under a plain ``dspy.configure``) and ``ambiqa serve``
    (a ``dspy.context`` per request) each installed the callback and the tap their own way;
    they now pass these settings to DSPy, so a change to what tracing needs is made here.
    """
    out = list(callbacks or [])
    if not any(isinstance(cb, TraceCallback) for cb in out):
        out.append(default_callback())
    tap = usage_tracker if isinstance(usage_tracker, UsageTap) else UsageTap(usage_tracker)
    return {"callbacks": out, "usage_tracker": tap}


@contextlib.contextmanager
def ensure_tracing() -> Iterator[bool]:
    """Make ambiqa's cost tracing active for the block, beside whatever the user installed.

    Under :func:`ambiqa.configure` nothing changes. Under a plain ``dspy.configure(lm=...)``
    the block runs in a ``dspy.context`` carrying :func:`traced` settings: the user's
    callbacks *plus* :func:`default_callback` (never instead of them), and a
    :class:`UsageTap` that forwards every usage to the user's own tracker, if any. Yields
    whether tracing had to be added. ``dspy.context`` may be entered from any thread, so this
    works inside worker threads and ``acall`` too.
    """
    if tracing_installed():
        yield False
        return
    import dspy

    with dspy.context(**traced(dspy.settings.get("callbacks"),
                               dspy.settings.get("usage_tracker"))):
        yield True


def untraced_lm_reason() -> str | None:
    """Why LM calls cannot be counted under the current settings, or None when they can.

    Counting rides on DSPy's callbacks, which every ``dspy.BaseLM`` (``dspy.LM`` and custom
    engines alike) fires; an LM object of another kind bypasses them, so a trace would report
    0 calls -- it says so instead.
    """
    import dspy

    lm = dspy.settings.get("lm")
    if lm is None or isinstance(lm, dspy.BaseLM):
        return None
    return (f"LM calls not counted: the configured LM is a {type(lm).__name__}, not a "
            "dspy.BaseLM, so DSPy reports none of its calls to callbacks")
