"""The embedded engine: a GGUF model run in-process by xllamacpp behind DSPy's engine API.

The measured settings from DESIGN.md are the defaults: 2 threads for prompt and generation,
4096-token context per slot, greedy decoding, max 512 new tokens. Concurrent calls share the
model through llama.cpp's slots with continuous batching (``n_parallel``, ``$AMBIQA_SLOTS``);
each signature's output is capped by its ``output_cap_tokens`` class attribute and stops at
the ChatAdapter's end marker. ``EmbeddedSettings.legacy()`` gives the old one-slot, uncapped
behaviour (kept so benchmarks can measure the difference in one run).
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.envutil import env_int
from ambiqa.errors import ConfigError
from ambiqa.lm.loop_guard import LoopWatch, cut_loop, guard_enabled
from ambiqa.lm.models import DEFAULT_MODEL, EMBEDDED_MODELS
from ambiqa.lm.resilience import LOOP_CUT_KEY
from ambiqa.tracing import note_finish_reason

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
    * ``loop_guard``: stop a reply at the third copy of a repeating sentence and keep one
      (:mod:`ambiqa.lm.loop_guard`; ``$AMBIQA_LOOP_GUARD=0`` turns it off).
    """

    model: str = DEFAULT_MODEL
    n_threads: int = 2
    n_ctx: int = 4096
    max_tokens: int = 512
    cache_ram_mib: int | None = None
    n_parallel: int = field(default_factory=_env_slots)
    output_caps: bool = True
    stop_at_marker: bool = True
    loop_guard: bool = field(default_factory=guard_enabled)
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
                                "stop_at_marker": False, "loop_guard": False}
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


def _is_error_chunk(chunk: Any) -> bool:
    """Whether a streamed llama.cpp chunk is an error report rather than a piece of reply."""
    return not isinstance(chunk, dict) or ("choices" not in chunk and (
        "error" in chunk or "message" in chunk or "code" in chunk))


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

    def _body(self, request: Any) -> dict[str, Any]:
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
        return body

    def _server_and_gate(self, body: dict[str, Any]) -> tuple[Any, Any]:
        with self._lock:
            server = self._ensure_server()
            gate = (self._prefix_locks.setdefault(prefix_key(body["messages"]),
                                                  threading.Lock())
                    if self.settings.n_parallel > 1 else contextlib.nullcontext())
        return server, gate

    def complete(self, request: Any) -> Any:
        from dspy.lm15 import Message, Response, TextPart, Usage

        body = self._body(request)
        server, gate = self._server_and_gate(body)
        if self.settings.loop_guard:
            raw = self._guarded(server, gate, body)
        else:
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
        note_finish_reason("loop" if raw.get("loop_cut") else finish)
        prompt_tokens, computed = computed_prompt_tokens(raw)
        return Response(
            id=raw.get("id") or None,
            model=f"embedded/{self.settings.model}",
            message=Message.assistant(TextPart(text)),
            finish_reason=finish,
            provider_data={LOOP_CUT_KEY: True} if raw.get("loop_cut") else None,
            usage=Usage(input_tokens=prompt_tokens,
                        output_tokens=int(usage.get("completion_tokens", 0)),
                        cache_read_tokens=prompt_tokens - computed),
        )

    def _guarded(self, server: Any, gate: Any, body: dict[str, Any]) -> dict[str, Any]:
        """One reply generated as a stream and watched for a repetition loop
        (:mod:`ambiqa.lm.loop_guard`): at the loop's third copy llama.cpp is told to stop and
        the reply keeps the first copy. Returned in the shape of a non-streamed reply, with
        ``"loop_cut": True`` when it was cut. A stopped stream sends no usage chunk, so the
        token counts come from the per-token timings (``prompt_n``, ``cache_n``,
        ``predicted_n``) of the last chunk."""
        watch = LoopWatch()
        state: dict[str, Any] = {"finish": None, "usage": {}, "timings": {}, "id": None,
                                 "error": None}

        def on_chunk(chunk: Any) -> bool:
            if _is_error_chunk(chunk):
                state["error"] = chunk
                return True
            state["id"] = chunk.get("id") or state["id"]
            state["usage"] = chunk.get("usage") or state["usage"]
            state["timings"] = chunk.get("timings") or state["timings"]
            for choice in chunk.get("choices") or []:
                state["finish"] = choice.get("finish_reason") or state["finish"]
                piece = (choice.get("delta") or {}).get("content")
                if piece and watch.feed(piece):
                    return True  # llama.cpp stops generating
            return False

        streamed = {**body, "stream": True, "stream_options": {"include_usage": True},
                    "timings_per_token": True}
        with gate, self._slots:
            server.handle_chat_completions(streamed, on_chunk)
        if state["error"] is not None:
            return state["error"] if isinstance(state["error"], dict) else {
                "error": str(state["error"])}
        # watched: cut at the third copy; else a loop whose last copy ended the reply
        kept = watch.cut if watch.cut is not None else cut_loop(watch.text)
        looped = kept is not None
        text = kept if kept is not None else watch.text
        timings = state["timings"]
        usage = dict(state["usage"])
        if not usage and timings:
            usage = {"prompt_tokens": int(timings.get("prompt_n") or 0)
                     + int(timings.get("cache_n") or 0),
                     "completion_tokens": int(timings.get("predicted_n") or 0)}
        return {"id": state["id"], "loop_cut": looped, "usage": usage, "timings": timings,
                "choices": [{"message": {"content": text},
                             "finish_reason": "stop" if looped else (state["finish"] or
                                                                      "stop")}]}

    def stream(self, request: Any) -> Iterator[Any]:
        """The reply token by token: llama.cpp's own streaming (``"stream": true``, each
        chunk handed to a callback while the slot generates) as lm15 events, with the
        usage and finish reason of :meth:`complete` on the end event. Generation runs on a
        worker thread holding the slot; closing this generator early makes the callback
        tell llama.cpp to stop, which frees the slot."""
        from dspy.lm15 import (
            StreamDeltaEvent,
            StreamEndEvent,
            StreamStartEvent,
            TextDelta,
            Usage,
        )

        body = {**self._body(request), "stream": True,
                "stream_options": {"include_usage": True}, "timings_per_token": True}
        server, gate = self._server_and_gate(body)
        chunks: queue.SimpleQueue = queue.SimpleQueue()
        stop = threading.Event()
        done = object()

        def on_chunk(chunk: Any) -> bool:
            chunks.put(chunk)
            return stop.is_set()  # True: llama.cpp stops generating

        def generate() -> None:
            try:
                with gate, self._slots:
                    server.handle_chat_completions(body, on_chunk)
            except BaseException as exc:  # handed to the reader
                chunks.put(exc)
            finally:
                chunks.put(done)

        threading.Thread(target=generate, daemon=True, name="ambiqa-embedded-stream").start()
        finish, usage, timings, reply_id = "stop", {}, {}, None
        watch = LoopWatch() if self.settings.loop_guard else None
        try:
            yield StreamStartEvent(model=f"embedded/{self.settings.model}")
            while True:
                chunk = chunks.get()
                if chunk is done:
                    break
                if isinstance(chunk, BaseException):
                    raise chunk
                if _is_error_chunk(chunk):
                    raise RuntimeError(f"embedded LM returned an error: {str(chunk)[:300]}")
                reply_id = chunk.get("id") or reply_id
                usage = chunk.get("usage") or usage
                timings = chunk.get("timings") or timings
                for choice in chunk.get("choices") or []:
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        yield StreamDeltaEvent(delta=TextDelta(text=text))
                        if watch is not None and watch.feed(text):
                            break  # a loop: the adapter keeps its first copy
                    finish = choice.get("finish_reason") or finish
                if watch is not None and watch.cut is not None:
                    finish = "stop"
                    break
        finally:
            stop.set()
        if finish not in ("stop", "length", "tool_call", "content_filter", "error"):
            finish = "stop"
        note_finish_reason("loop" if watch is not None and watch.cut is not None else finish)
        prompt_tokens, computed = computed_prompt_tokens({"usage": usage, "timings": timings})
        yield StreamEndEvent(finish_reason=finish, usage=Usage(
            input_tokens=prompt_tokens,
            # a stream stopped at a loop gets no usage chunk: the per-token timings count
            output_tokens=int(usage.get("completion_tokens") or timings.get("predicted_n") or 0),
            cache_read_tokens=prompt_tokens - computed))

    def close(self) -> None:
        with self._lock:
            self._server = None
