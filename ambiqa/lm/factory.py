"""Building and installing LMs: ``make_lm``, ``embedded_lm``, ``endpoint_lm``, ``configure``.

Every engine, embedded or endpoint, is wrapped in a
:class:`~ambiqa.lm.resilience.ResilientEngine` and handed to DSPy as ``dspy.LM(...,
engine=...)`` with DSPy's own retries off.

The response cache (DSPy's, on by default) keys on the request and the LM's keywords, not on
the engine behind it: two endpoints serving a model of the same name shared their cached
replies, so a run against a dead ``--api-base`` was answered from another endpoint's cache
(issue 42). Each LM therefore carries :func:`answer_identity` -- everything that changes an
answer but is not in the request: the endpoint (credentials removed), the key variable's name,
the embedded model and whether its output caps are on -- as a cache keyword (see
:data:`~ambiqa.lm.resilience.CACHE_IDENTITY_KEY`). And since a cache can still answer for an
endpoint that went down since, the command line probes the endpoint before it runs
(:func:`check_reachable`). The caps' values reach the key as each call's ``max_tokens``
(:class:`~ambiqa.lm.capped.CappedLM`).
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass, replace
from typing import Any

from ambiqa.envutil import env_int
from ambiqa.errors import ConfigError, LMUnavailableError
from ambiqa.lm.adapter import ListTolerantChatAdapter
from ambiqa.lm.capped import CappedLM
from ambiqa.lm.embedded import EmbeddedSettings, XLlamaEngine
from ambiqa.lm.endpoint import EndpointEngine
from ambiqa.lm.models import DEFAULT_MODEL, FAST_MODEL, assemble_model
from ambiqa.lm.redact import endpoint_host, install_log_redaction, redact, register_secret
from ambiqa.lm.resilience import CACHE_IDENTITY_KEY, ResilientEngine, RetryPolicy
from ambiqa.tracing import default_callback, traced

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
    # the engine reads loop_guard itself (it stops generation), so it is part of the key
    key = (settings.model, settings.n_threads, settings.n_ctx, settings.cache_ram_mib,
           settings.n_parallel, settings.loop_guard)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = XLlamaEngine(assemble_model(settings.model), settings)
            _ENGINES[key] = engine
    policy = policy or RetryPolicy.from_env(**asdict(EMBEDDED_POLICY))
    # the loop guard's replies are cut unguarded ones (ambiqa.lm.loop_guard), so guarded runs
    # share the cache with the replies stored before it; unguarded runs must not read cut ones
    unguarded = {} if settings.loop_guard else {"loop_guard": "off"}
    identity = answer_identity("embedded", settings.model, n_ctx=settings.n_ctx,
                               output_caps=settings.output_caps,
                               stop_at_marker=settings.stop_at_marker, **unguarded)
    # with output caps on, each call's cap is its max_tokens, so the response cache keys on it
    lm_class = CappedLM if settings.output_caps else dspy.LM
    return lm_class(
        f"embedded/{settings.model}",
        engine=ResilientEngine(engine, policy, model=f"embedded/{settings.model}",
                               output_caps=settings.output_caps,
                               stop_at_marker=settings.stop_at_marker),
        temperature=0.0,
        max_tokens=settings.max_tokens,
        cache=cache,
        num_retries=0,
        metadata={CACHE_IDENTITY_KEY: identity},
    )


def answer_identity(kind: str, model: str, **settings: Any) -> str:
    """What answers a call, beyond the request DSPy's cache already keys on (messages,
    temperature, max_tokens...): the engine kind, the model and the settings that change a
    reply (an endpoint's URL without credentials, the key variable's *name*, the embedded
    model's context and output caps). Never a secret: it is stored with the LM's keywords."""
    parts = [kind, model] + [f"{k}={'' if v is None else v}" for k, v in sorted(settings.items())]
    return redact("|".join(str(p) for p in parts))


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

    # a URL may carry credentials and an endpoint may echo a key: keep both out of every log
    install_log_redaction()
    key: str | None = None
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise ConfigError(f"environment variable {api_key_env} is not set",
                              hint=f"export {api_key_env}=... before running")
        register_secret(key)  # an endpoint may echo it in an error body (issue 42)
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
    identity = answer_identity("endpoint", model, api_base=api_base, api_key_env=api_key_env)
    return dspy.LM(model, engine=ResilientEngine(inner, policy, model=model),
                   temperature=temperature, max_tokens=max_tokens, cache=cache, num_retries=0,
                   metadata={CACHE_IDENTITY_KEY: identity})


#: seconds the liveness probe waits for an endpoint's first byte
PROBE_TIMEOUT_S = 5.0


def check_reachable(lm: Any, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Refuse to start when ``lm`` is an endpoint that does not answer, before any question.

    Why: with the response cache on, questions asked before are answered from the cache
    without the endpoint, so a dead ``--api-base`` passed for a working one (issue 42: exit 0,
    0 tokens). One ``GET {api_base}/models`` settles it in milliseconds; with the cache off a
    dead endpoint fails every question anyway (and is recorded so), so only cached LMs are
    probed. The embedded model and endpoints without ``api_base`` (a provider's own URL,
    which LiteLLM knows and ambiqa does not) are not probed, nor is anything when
    ``$AMBIQA_NO_PROBE=1`` (a gateway whose ``/models`` refuses what its chat route takes).
    Raises
    :class:`~ambiqa.errors.LMUnavailableError` with one line (the CLI's exit 2).
    """
    engine = getattr(lm, "engine", None)
    inner = getattr(engine, "inner", engine)
    if not isinstance(inner, EndpointEngine) or not inner.api_base or \
            not getattr(lm, "cache", False) or os.environ.get("AMBIQA_NO_PROBE") == "1":
        return
    problem = inner.probe(timeout_s)
    if problem is not None:
        raise LMUnavailableError(
            redact(f"the LM endpoint {endpoint_host(inner.api_base)} does not answer: "
                   f"{problem}"),
            hint="start the server or fix --api-base (and the key variable); answers cached "
                 "from earlier runs are never used in place of a dead endpoint (a server "
                 "without GET /models that answers chat anyway: AMBIQA_NO_PROBE=1)",
            kind="connection")


def make_lm(spec: str | None = None, *, api_base: str | None = None,
            api_key_env: str | None = None, max_tokens: int = 512, threads: int | None = None,
            n_ctx: int = 4096, cache: bool = True) -> Any:
    """Build an LM from a short spec.

    ``None`` / ``"embedded"`` → the default embedded model; ``"embedded:qwen2.5-coder-0.5b"`` →
    a named embedded model; anything else is a provider/model string for :func:`endpoint_lm`.
    ``$AMBIQA_LM`` supplies the spec when none is given. The embedded model serves
    ``$AMBIQA_SLOTS`` concurrent calls (default :data:`DEFAULT_SLOTS`; 1 makes temperature-0
    replies identical to a serial run) and caps each signature's output
    (its ``output_cap_tokens``). Endpoint LMs keep ``max_tokens`` as given.
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


@dataclass(frozen=True)
class LMSpec:
    """Which LM a run uses, as data: what ``--lm`` and its companion flags say, before any
    model loads.

    Why a value and not a callback: the caller (the CLI, ``serve``, a script) decides the LM
    and the api builds it, once, after its cheap checks (a typo fails before a 1.5B model
    loads), and records it in ``run.json`` from here instead of reading it back from DSPy's
    settings. ``api_key_env`` is the *name* of the variable holding the key, never the key,
    so a spec can be logged and stored.
    """

    #: ``"embedded"``, ``"embedded:NAME"`` or ``"provider/model"``; None: ``$AMBIQA_LM``,
    #: else the embedded default (:meth:`resolved` settles which, once)
    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    max_tokens: int = 512
    #: embedded LM threads (None: ``$AMBIQA_THREADS``, else 2)
    threads: int | None = None
    n_ctx: int = 4096
    cache: bool = True
    #: probe an endpoint before the first question (:func:`check_reachable`)
    probe: bool = True

    @classmethod
    def of(cls, lm: str | LMSpec) -> LMSpec:
        """``lm`` as a spec: a spec string becomes ``LMSpec(model=lm)``."""
        return lm if isinstance(lm, LMSpec) else cls(model=lm)

    @property
    def name(self) -> str:
        """The spec string this LM resolves to (what ``run.json`` records as ``lm``)."""
        return self.model or os.environ.get("AMBIQA_LM") or "embedded"

    def resolved(self) -> LMSpec:
        """This spec with ``model`` settled (``$AMBIQA_LM`` read here, once), so the label
        recorded and the model built can never disagree."""
        return self if self.model else replace(self, model=self.name)

    def build(self) -> Any:
        """The ``dspy.LM`` (not configured as DSPy's default: the caller decides where it
        applies), an endpoint probed first when :attr:`probe` (issue 42: a cache must never
        answer for a dead endpoint)."""
        lm = make_lm(self.model, api_base=self.api_base, api_key_env=self.api_key_env,
                     max_tokens=self.max_tokens, threads=self.threads, n_ctx=self.n_ctx,
                     cache=self.cache)
        if self.probe:
            check_reachable(lm)
        return lm


def trace_callback() -> Any:
    """The process-wide :class:`ambiqa.tracing.TraceCallback` (created once)."""
    return default_callback()


def configure(lm: Any, **settings: Any) -> Any:
    """Make ``lm`` DSPy's default LM and install ambiqa's cost tracing. Returns ``lm``.

    The tracing callback is added *beside* the callbacks already configured (a user's MLflow
    or Langfuse autologging keeps receiving events); ``callbacks=[...]`` replaces them, as in
    ``dspy.configure``. A usage tracker already installed keeps receiving every usage. The
    adapter is :class:`ambiqa.lm.adapter.ListTolerantChatAdapter` unless ``adapter=`` is given.
    """
    import dspy

    tracing = traced(settings.pop("callbacks", dspy.settings.get("callbacks")),
                     dspy.settings.get("usage_tracker"))
    settings.setdefault("usage_tracker", tracing["usage_tracker"])
    if settings.get("adapter") is None:
        # ChatAdapter's prompts, plus a list field written as a Markdown list read on the
        # first try instead of a second, JSONAdapter call (ambiqa/lm/adapter.py)
        settings["adapter"] = ListTolerantChatAdapter()
    dspy.configure(lm=lm, callbacks=tracing["callbacks"], **settings)
    return lm


def lm_id(lm: Any) -> str:
    """A stable, secret-free name for an LM (recorded in artifact manifests)."""
    return str(getattr(lm, "model", type(lm).__name__))
