"""Per-predictor demos: how many (``k``, 0 allowed) and from where, for each predictor.

A whole-program teleprompter gives every predictor demos of the same kind. In a multi-stage
program that is the wrong unit: compiled Diva's inner steps improved with demos chosen against
their own signals while the writer, shown two short bootstrapped answers, copied their length
and sank the program (``benchmarks/results/compile-v3``). A *demo plan* names a source per
predictor, and the sources compose::

    verify=signal:2,typing=signal:2,rewrite=signal:2,write=gold:1,clarify=none

Sources:

* ``none`` -- no demos (zero-shot for that predictor);
* ``keep`` -- the demos it already has (from the teleprompter, or the input program);
* ``gold`` -- ``k`` labeled demos from the training data (:mod:`ambiqa.optimizers.demos`;
  the writer's are those in the references' typical form,
  :func:`~ambiqa.optimizers.demos.pick_gold`);
  refused for a predictor whose signature no gold data labels;
* ``signal`` -- ``k`` demos chosen against the predictor's own signal
  (:mod:`ambiqa.optimizers.signals`) from one traced pass over the training questions;
* ``bootstrap`` -- the predictor's demos from a BootstrapFewShot run (``k`` traces that pass
  the metric).

A predictor is named by its path in ``named_predictors()`` (``long_answer.write``), any dotted
part of it (``write``), its signature (``WriteLongAnswer``) or a role alias (:data:`ALIASES`);
a name that matches none or several predictors is a one-line error listing them. Predictors the
plan does not name keep their demos. The plan, as applied, is recorded in the artifact's
manifest (``optimizer.demo_plan``) and shown by ``ambiqa export``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ambiqa.errors import ConfigError

SOURCES = ("none", "keep", "gold", "signal", "bootstrap")
#: role names a user would reach for -> the signature they mean
ALIASES = {
    "writer": "WriteLongAnswer", "long_answer": "WriteLongAnswer",
    "verifier": "VerifyRetrieval", "typing": "TypeAmbiguity",
    "rewrite": "PseudoInterpretations", "rewriting": "PseudoInterpretations",
    "self_verify": "SelfVerify", "read": "InterpretFromPassage", "reader": "InterpretFromPassage",
    "closed_book": "ClosedBookLongAnswer", "clarify": "ClarifyFromPassages",
}


@dataclass(frozen=True)
class DemoSource:
    """Where one predictor's demos come from, and how many."""

    source: str
    k: int = 0

    def __str__(self) -> str:
        return self.source if self.source in ("none", "keep") else f"{self.source}:{self.k}"


def parse_source(text: str, default_k: int = 2) -> DemoSource:
    """``none`` | ``keep`` | ``gold[:k]`` | ``signal[:k]`` | ``bootstrap[:k]``."""
    name, _, k_text = text.strip().lower().partition(":")
    if name not in SOURCES:
        raise ConfigError(f"unknown demo source {name!r} in {text!r}",
                          hint=f"choose one of {', '.join(SOURCES)} (e.g. gold:2)")
    if name in ("none", "keep"):
        if k_text:
            raise ConfigError(f"demo source {name!r} takes no count ({text!r})")
        return DemoSource(name, 0)
    try:
        k = int(k_text) if k_text else default_k
    except ValueError:
        raise ConfigError(f"demo count must be a whole number in {text!r}") from None
    if k < 0:
        raise ConfigError(f"demo count must be 0 or more in {text!r}")
    return DemoSource("none", 0) if k == 0 else DemoSource(name, k)


def parse_plan(text: str | dict[str, Any] | None, default_k: int = 2) -> dict[str, DemoSource]:
    """``"verify=signal:2,write=none"`` (or a dict of the same) -> {predictor key: source}."""
    if text is None or text == "" or text == {}:
        return {}
    items = (list(text.items()) if isinstance(text, dict)
             else [part.partition("=")[::2] for part in str(text).split(",") if part.strip()])
    plan: dict[str, DemoSource] = {}
    for key, value in items:
        key = str(key).strip()
        if not key or not str(value).strip():
            raise ConfigError(f"demo plan entries are PREDICTOR=SOURCE, got {key}={value!r}",
                              hint="e.g. --demos verify=signal:2,write=gold:1,clarify=none")
        if key in plan:
            raise ConfigError(f"predictor {key!r} appears twice in the demo plan")
        plan[key] = value if isinstance(value, DemoSource) else parse_source(str(value),
                                                                              default_k)
    return plan


def match_predictor(program: Any, key: str) -> str:
    """The one ``named_predictors()`` name ``key`` designates (see the module docstring)."""
    named = [(n, p.signature.__name__) for n, p in program.named_predictors()]
    want = key.strip().lower().replace("-", "_")
    sig_alias = ALIASES.get(want, "").lower()

    def hits(test: Any) -> list[str]:
        return [n for n, sig in named if test(n.lower(), sig.lower())]

    for test in (lambda n, s: n == want,
                 lambda n, s: want in n.split("."),
                 lambda n, s: s == want or (sig_alias and s.startswith(sig_alias))):
        found = hits(test)
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise ConfigError(f"{key!r} matches several predictors: {', '.join(found)}",
                              hint="name one by its full path")
    listing = ", ".join(f"{n} ({s})" for n, s in named)
    raise ConfigError(f"no predictor {key!r} in {getattr(program, 'name', 'the program')}",
                      hint=f"its predictors: {listing}")


def resolve_plan(program: Any, plan: dict[str, DemoSource]) -> dict[str, DemoSource]:
    """The plan keyed by full predictor names (each key matched once)."""
    out: dict[str, DemoSource] = {}
    for key, source in plan.items():
        name = match_predictor(program, key)
        if name in out:
            raise ConfigError(f"two demo-plan entries name predictor {name}")
        out[name] = source
    return out


def apply_plan(program: Any, plan: dict[str, DemoSource], trainset: list[Any], *,
               metric: Any = None, seed: int = 0, budget: Any = None, threads: int = 1,
               say: Any = None) -> dict[str, dict[str, Any]]:
    """Give each predictor the plan names its demos from its source (in place).

    Order: ``none``/``keep``/``gold`` first (no LM call), then one traced pass over the
    training questions for every ``signal`` entry (with the demos just set, so a signal demo
    is what the predictor does in the program it will ship in), then one bootstrap run per
    distinct ``k`` among the ``bootstrap`` entries. Returns, per predictor, what was applied.
    ``threads``: training questions the signal pass answers at once; ``say`` its progress.
    """
    from ambiqa.optimizers.demos import labeled_demos, pick_gold

    resolved = resolve_plan(program, plan)
    predictors = dict(program.named_predictors())
    done: dict[str, dict[str, Any]] = {}
    pools: dict[str, list[Any]] | None = None
    for name, src in resolved.items():
        predictor = predictors[name]
        if src.source == "none":
            predictor.demos = []
        elif src.source == "gold":
            pools = labeled_demos(trainset) if pools is None else pools
            pool = pools.get(predictor.signature.__name__, [])
            if not pool:
                raise ConfigError(f"no gold demos for {name} ({predictor.signature.__name__}) "
                                  "in the training data",
                                  hint="use signal or bootstrap for this predictor")
            predictor.demos = pick_gold(pool, src.k, random.Random(seed),
                                        predictor.signature.__name__)
        if src.source in ("none", "keep", "gold"):
            done[name] = {"source": str(src), "demos": len(predictor.demos)}
    signal = {n: s for n, s in resolved.items() if s.source == "signal"}
    if signal:
        done.update(_apply_signal_sources(program, signal, trainset, metric, seed, budget,
                                          threads, say))
    boot = {n: s for n, s in resolved.items() if s.source == "bootstrap"}
    if boot:
        done.update(_apply_bootstrap_sources(program, boot, trainset, metric, seed, budget))
    return done


def _apply_signal_sources(program: Any, entries: dict[str, DemoSource], trainset: list[Any],
                          metric: Any, seed: int, budget: Any, threads: int = 1,
                          say: Any = None) -> dict[str, dict[str, Any]]:
    from ambiqa.optimizers.signals import SIGNALLED, collect_traces, signal_demos

    predictors = dict(program.named_predictors())
    for name in entries:
        sig = predictors[name].signature.__name__
        if sig not in SIGNALLED:
            raise ConfigError(f"{name} ({sig}) has no signal of its own",
                              hint=f"signalled predictors: {', '.join(sorted(SIGNALLED))}")
    records = collect_traces(program, trainset, metric, budget, threads=threads, say=say)
    out: dict[str, dict[str, Any]] = {}
    for k in sorted({s.k for s in entries.values()}):
        trial = program.deepcopy()
        chosen = signal_demos(trial, records, k, seed=seed)
        trial_predictors = dict(trial.named_predictors())
        for name, src in entries.items():
            if src.k != k:
                continue
            info = chosen.get(name, {"demos": 0, "kept_previous": True})
            if info.get("demos"):
                predictors[name].demos = list(trial_predictors[name].demos)
            out[name] = {"source": str(src), **info, "runs": len(records)}
    return out


def _apply_bootstrap_sources(program: Any, entries: dict[str, DemoSource],
                             trainset: list[Any], metric: Any, seed: int, budget: Any,
                             ) -> dict[str, dict[str, Any]]:
    from ambiqa.optimizers.teleprompters import bootstrap

    if metric is None:
        raise ConfigError("bootstrap demos need a metric (e.g. --metric dr)")
    predictors = dict(program.named_predictors())
    out: dict[str, dict[str, Any]] = {}
    for k in sorted({s.k for s in entries.values()}):
        booted = dict(bootstrap(program, trainset, metric, k=k, seed=seed, budget=budget,
                                fill=False).named_predictors())
        for name, src in entries.items():
            if src.k == k:
                predictors[name].demos = list(booted[name].demos)[:k]
                out[name] = {"source": str(src), "demos": len(predictors[name].demos)}
    return out


def describe_plan(applied: dict[str, dict[str, Any]]) -> str:
    """One line: ``verify=signal:2 (2), write=none (0)``."""
    return ", ".join(f"{n}={v['source']} ({v.get('demos', 0)})" for n, v in applied.items())
