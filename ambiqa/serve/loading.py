"""What ``ambiqa serve`` serves: a compiled program with its LM and index, and how many calls
the LM can take at once.

Loading is separate from the app so the app can start listening first (``/healthz`` answers,
``/readyz`` says "loading") while the LM and the index load and the program warms up
(:meth:`ServedProgram.warm_up`), and so tests can hand the app a program with a scripted LM
instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.api.loader import ProgramFile, open_program, read_program_file
from ambiqa.errors import ConfigError
from ambiqa.lm.factory import LMSpec
from ambiqa.retrieval.factory import describe
from ambiqa.retrieval.warmup import WarmStep, warm_up

#: Concurrency for an endpoint LM whose capacity ambiqa cannot know (``--concurrency`` sets it).
DEFAULT_ENDPOINT_SLOTS = 4


@dataclass
class ServedProgram:
    """A program ready to answer, and what ``GET /v1/program`` reports about it."""

    program: Any
    lm: Any
    artifact: str
    manifest: dict[str, Any] = field(default_factory=dict)
    index: dict[str, Any] = field(default_factory=dict)
    #: concurrent calls the LM serves (the embedded model's slots, else the configured value)
    lm_slots: int = 1

    def warm_up(self, say: Callable[[str], None] | None = None) -> list[WarmStep]:
        """Load what the first question would load (the program's ``warm_up``; for a plain
        DSPy module the same walk over its modules and retrievers), each step announced
        through ``say``. The app runs this before ``/readyz`` says ready (issue 42: the first
        answer after "ready" took 8-15 s more for the encoder, 86 s for ColBERT)."""
        hook = getattr(self.program, "warm_up", None)
        if callable(hook):
            return list(hook(say=say) or [])
        return warm_up([self.program], say)

    def describe(self) -> dict[str, Any]:
        """Program, optimizer, demos per predictor, index and the whole manifest."""
        demos = {name: len(getattr(pred, "demos", []) or [])
                 for name, pred in self.program.named_predictors()}
        return {
            "program": self.manifest.get("program") or getattr(self.program, "name", ""),
            "artifact": self.artifact,
            "optimizer": self.manifest.get("optimizer"),
            "demos_per_predictor": demos,
            "index": self.index,
            "lm": str(getattr(self.lm, "model", "")),
            "lm_slots": self.lm_slots,
            "has_async_path": has_aforward(self.program),
            "manifest": self.manifest,
        }


def has_aforward(program: Any) -> bool:
    """Whether the program defines its own async path (``aforward``), which ``acall`` runs.

    ``dspy.Module`` itself has no ``aforward``; programs written before the async path have
    none, and are run in a worker thread instead.
    """
    return callable(getattr(program, "aforward", None))


def lm_slots(lm: Any) -> int | None:
    """How many calls the LM serves at once, when the LM says: the embedded model's
    ``n_parallel`` slots. ``None`` for endpoints (their capacity is not visible from here)."""
    engine = getattr(lm, "engine", None)
    try:
        settings = getattr(engine, "settings", None)
    except AttributeError:
        settings = None
    n = getattr(settings, "n_parallel", None)
    return int(n) if isinstance(n, int) and n >= 1 else None


def load_served(artifact: str | Path | ProgramFile, *, lm: LMSpec | str | None = None,
                lm_spec: str | None = None, api_base: str | None = None,
                api_key_env: str | None = None, max_tokens: int = 512,
                lm_threads: int | None = None, cache: bool = True,
                index: str | None = None, index_root: str | None = None,
                concurrency: int | None = None) -> ServedProgram:
    """Build the LM, then load the program file through the one loader
    (:mod:`ambiqa.api.loader`: what ``ambiqa.load`` and ``ask`` do, the same fingerprint
    policy, a program that needs a retriever and has none refused), without making the LM
    DSPy's global default: the app passes it to each request's context.

    ``artifact``: an artifact or a program's own ``.save()`` JSON, or the
    :class:`~ambiqa.api.loader.ProgramFile` the CLI already read before it started listening
    (so the file is read once). ``lm``: the LM as an :class:`~ambiqa.lm.factory.LMSpec` (what
    the CLI passes) or a spec string; without it the keywords ``lm_spec``, ``api_base``,
    ``api_key_env``, ``max_tokens``, ``lm_threads`` and ``cache`` make the spec (the older
    calling form). Either way the LM is built the one way every command builds it,
    :meth:`LMSpec.build`, which probes an endpoint first: never "ready" in front of a dead
    endpoint whose answers the cache would fake (issue 42).
    """
    spec = LMSpec.of(lm) if lm is not None else LMSpec(
        model=lm_spec, api_base=api_base, api_key_env=api_key_env, max_tokens=max_tokens,
        threads=lm_threads, cache=cache)
    built = spec.build()
    pf = artifact if isinstance(artifact, ProgramFile) else read_program_file(artifact)
    found = open_program(pf, index=index or None, index_root=index_root)
    program = found.program
    manifest = dict(found.manifest or {})
    info = describe(getattr(program, "retriever", None))
    info = {**(manifest.get("retriever") or {}), **{k: v for k, v in info.items() if v}}
    if index:
        info["opened_as"] = index
    return ServedProgram(program=program, lm=built, artifact=str(pf.path), manifest=manifest,
                         index=info, lm_slots=choose_slots(built, concurrency))


def choose_slots(lm: Any, concurrency: int | None) -> int:
    """The endpoint's concurrency: ``concurrency`` if given, else the LM's own slots, else
    :data:`DEFAULT_ENDPOINT_SLOTS`. More than the embedded model's slots is refused: the extra
    requests would only queue inside the LM, past the timeout and queue limits."""
    own = lm_slots(lm)
    if concurrency is None:
        return own or DEFAULT_ENDPOINT_SLOTS
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"--concurrency must be an integer >= 1, got {concurrency!r}")
    if own is not None and concurrency > own:
        raise ConfigError(f"--concurrency {concurrency} exceeds the embedded LM's {own} slots",
                          hint=f"raise $AMBIQA_SLOTS to {concurrency} or serve with "
                               f"--concurrency {own}")
    return concurrency
