"""The teleprompter registry: every ``--optimizer`` is a class that registers itself.

A teleprompter follows DSPy's own shape -- settings in ``__init__``, then
``compile(student, *, trainset, ...)`` -- plus what ambiqa needs around it: a one-line
``summary`` for ``--help``, whether it scores candidates on a held-out part of the training
split (``holds_out``), whether it needs a metric, the program calls it makes (for
``--dry-run``) and any run-time hook a compiled program needs again when loaded (knn).

Adding an optimizer takes one class and one ``@register_teleprompter`` (plus its tests)::

    @register_teleprompter
    class Mine(Teleprompter):
        name = "mine"
        summary = "what it does, in one line"
        def compile(self, student, job):
            ...

The built-in ones are listed here by *name and location* only, so that this module (and the
CLI's fast ``--help``, which lists them) loads no DSPy; their classes are imported the first
time one is asked for (:mod:`ambiqa.optimizers.teleprompters`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ambiqa.errors import ConfigError

#: built-in teleprompters: name -> (module:class, one-line summary), in the order --help shows
BUILTIN: dict[str, tuple[str, str]] = {
    "none": ("ambiqa.optimizers.teleprompters:ZeroShot",
             "the program as written (zero-shot): the baseline every compile is checked against"),
    "labeled": ("ambiqa.optimizers.teleprompters:Labeled",
                "k gold demos per predictor from the training data; no LM call"),
    "bootstrap": ("ambiqa.optimizers.teleprompters:Bootstrap",
                  "DSPy BootstrapFewShot: the first k traces that pass the metric become demos"),
    "bootstrap-rs": ("ambiqa.optimizers.teleprompters:BootstrapRS",
                     "random search: zero-shot, labeled and N bootstrapped demo sets, the best "
                     "on a held-out part of train wins"),
    "knn": ("ambiqa.optimizers.teleprompters:KNN",
            "nearest-neighbour demos per question from a pool of gold demos and traces"),
    "mipro": ("ambiqa.optimizers.teleprompters:MIPRO",
              "DSPy MIPROv2: instructions and demos by Bayesian search"),
    "gepa": ("ambiqa.optimizers.teleprompters:GEPA",
             "DSPy GEPA: instructions evolved by reflecting on ambiguity-aware feedback"),
    "simba": ("ambiqa.optimizers.teleprompters:SIMBA",
              "DSPy SIMBA: mini-batch ascent adding self-written rules and demos"),
}

_REGISTERED: dict[str, type[Teleprompter]] = {}


@dataclass
class CompileJob:
    """What every teleprompter is given besides the student program.

    ``metric`` is already NaN-safe (:class:`ambiqa.optimizers.compile.SafeMetric`) or None;
    ``valset`` is the held-out part of the training split (teleprompters with ``holds_out``);
    ``report`` collects what the teleprompter wants recorded (its ``settings``, candidates).
    """

    trainset: list[Any]
    metric: Any
    report: Any
    budget: Any
    k: int = 2
    seed: int = 0
    threads: int = 1
    valset: list[Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Teleprompter:
    """Base class: settings in ``__init__`` (only the keywords in ``options`` are kept)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    #: scores candidates on a held-out part of the training split
    holds_out: ClassVar[bool] = False
    needs_metric: ClassVar[bool] = False
    #: keyword settings this teleprompter reads, with their defaults
    options: ClassVar[dict[str, Any]] = {}

    def __init__(self, **settings: Any) -> None:
        self.settings = {key: settings.get(key, default) for key, default in self.options.items()}

    def compile(self, student: Any, job: CompileJob) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def program_calls(cls, n_train: int, n_val: int, num_candidates: int, trials: int,
                      ) -> tuple[float, float]:
        """(program calls without demos, program calls with demos) one compile makes."""
        return 0.0, 0.0

    @classmethod
    def proposer_calls(cls, plain: float, n_predictors: int, num_candidates: int) -> float:
        """LM calls that write instructions or rules (not program calls)."""
        return 0.0

    @classmethod
    def install(cls, program: Any, settings: dict[str, Any], *, encoder: Any = None) -> None:
        """Re-install run-time behaviour a loaded artifact needs (default: none)."""


def register_teleprompter(cls: type[Teleprompter]) -> type[Teleprompter]:
    """Class decorator: make ``cls`` available as ``--optimizer cls.name``."""
    if not cls.name or not cls.summary:
        raise TypeError(f"{cls.__name__} needs a name and a one-line summary")
    _REGISTERED[cls.name] = cls
    return cls


def teleprompter_names() -> tuple[str, ...]:
    """Every teleprompter: the built-in ones first, then those registered later."""
    return (*BUILTIN, *(n for n in _REGISTERED if n not in BUILTIN))


def teleprompter_summaries() -> dict[str, str]:
    """Name -> one line, without importing any teleprompter class."""
    out = {name: summary for name, (_, summary) in BUILTIN.items()}
    out.update({n: c.summary for n, c in _REGISTERED.items() if n not in BUILTIN})
    return out


def get_teleprompter(name: str) -> type[Teleprompter]:
    """The class registered as ``name``; a one-line error listing the choices otherwise."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in BUILTIN:
        raise ConfigError(f"unknown teleprompter {name!r}",
                          hint=f"choose one of {', '.join(teleprompter_names())}")
    module, attr = BUILTIN[name][0].split(":")
    cls = getattr(importlib.import_module(module), attr)
    _REGISTERED.setdefault(name, cls)
    return cls
