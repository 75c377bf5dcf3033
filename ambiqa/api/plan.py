"""One evaluation run, decided once: validated settings -> a frozen :class:`EvaluatePlan`.

Why a plan: ``ambiqa evaluate diva --data ... --index ...`` used to decide the same things
several times on its way down (name-or-file three times, the program class five, metric names
two or three, the flags' ranges in the CLI and again in the api, the LM spec twice plus a
read-back from DSPy's settings, the run directory twice, the ``RunSpec`` twice), and the api
called back up into the CLI to build the LM. :func:`plan_evaluate` makes every decision that
needs no model exactly once, in the order that lets a typo fail in a second (settings, target,
data, metrics, program file, run directory) and returns them frozen; the runner
(:func:`ambiqa.api.jobs.run_plan`) then opens the program, builds the LM from the plan's
:class:`~ambiqa.lm.factory.LMSpec` and runs, deciding nothing again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ambiqa.api.loader import ProgramFile, read_program_file
from ambiqa.api.targets import is_file_target
from ambiqa.data import load_dataset, metrics_for
from ambiqa.data.loaders.common import make_example
from ambiqa.data.specs import ALIASES, DATASETS, PLAIN
from ambiqa.errors import ConfigError, DataError
from ambiqa.evaluation.registry import canonical_name, get_metric, with_set_parts
from ambiqa.evaluation.runs.parts import part_of
from ambiqa.evaluation.runs.runner import RunSpec, check_run_dir, ensure_writable_dir
from ambiqa.lm.factory import LMSpec
from ambiqa.programs.registry import program_class

#: what a target is: a registered program name, a program file, or a program object
TargetKind = Literal["name", "file", "object"]


@dataclass(frozen=True)
class EvaluateSettings:
    """How to evaluate. Every field has a default; ``out`` keeps results on disk."""

    #: metric names (list or comma string); None: chosen from the data's fields
    metrics: Any = None
    #: run directory (results.jsonl, summary.json, report.md); None: in memory only
    out: str | Path | None = None
    resume: bool = False
    retry_errors: bool = False
    threads: int = 1
    timeout_s: float | None = None
    max_error_rate: float = 0.5
    #: D-F1 reader: None (the trained extractive reader if built, else the LM), "lm", a path
    reader: str | None = None
    #: the index to open for a program name (a file target opens the one it records)
    index: str | None = None
    index_root: str | Path | None = None
    #: settings for a program name (``{"k": 5}``)
    program_config: dict[str, Any] | None = None
    #: what run.json records as the LM (default: the spec passed as ``lm``, resolved)
    lm_label: str | None = None
    #: what run.json records as the endpoint (default: the LM's api_base without credentials);
    #: a caller that starts its own server on a new port each time names it here, so that a
    #: resume still matches (benchmarks/peers.py's ``--serve``)
    endpoint_label: str | None = None
    #: ``I/N``: only the I-th of N contiguous slices of the data (``ambiqa merge`` joins them)
    part: str | None = None
    progress: bool = False
    #: extra RunSpec settings (recorded in run.json; a resume must match them)
    extra: dict[str, Any] = field(default_factory=dict)
    #: how the caller spells a field in error messages (the CLI: ``{"threads": "--threads"}``),
    #: so the one check names what the user typed; not a setting of the run
    spelled: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def check(self) -> None:
        """Refuse values no run can use, each message naming the field as the caller
        spelled it (the only range check of an evaluation: the CLI no longer repeats it)."""
        def name(key: str) -> str:
            return self.spelled.get(key, key)

        if (not isinstance(self.threads, int) or isinstance(self.threads, bool)
                or self.threads < 1):
            raise ConfigError(f"{name('threads')} must be at least 1, got {self.threads!r}")
        if self.timeout_s is not None:
            if not self.timeout_s < float("inf") or self.timeout_s != self.timeout_s:
                # nan passes a "<= 0" test and inf overflows the timer (issue 42)
                raise ConfigError(f"{name('timeout_s')} must be a finite number of seconds, "
                                  f"got {self.timeout_s}")
            if self.timeout_s <= 0:
                raise ConfigError(f"{name('timeout_s')} must be positive, got {self.timeout_s}")
        if not 0.0 <= self.max_error_rate <= 1.0:
            raise ConfigError(f"{name('max_error_rate')} must be within [0, 1], got "
                              f"{self.max_error_rate}")
        if self.resume and self.out is None:
            raise ConfigError("resume needs a run directory", hint="pass out=DIR")


@dataclass(frozen=True)
class EvaluatePlan:
    """Everything an evaluation decided before any model loads; the runner only executes it.

    ``run_spec`` is the ``run.json`` of the run as far as it is known now; the runner adds
    only what needs the program or the reader (the reader's name and identity, the judge, the
    index fingerprint).
    """

    settings: EvaluateSettings
    target: Any
    kind: TargetKind
    #: the program's name as its registry spells it (a name target), else the label
    label: str
    #: the registered class of a name target (looked up once), else None
    program_class: type | None
    #: a file target read and validated once (its sha256 comes from the same read)
    program_file: ProgramFile | None
    examples: tuple[Any, ...]
    data_label: str
    #: canonical metric names, set-level parts included (DR brings its parts)
    metrics: tuple[str, ...]
    #: the LM to build (a resolved spec), an LM object to use, or None (DSPy's configured LM)
    lm: LMSpec | Any
    retriever: Any
    out: Path | None
    #: the ``run.json`` a resume continues (None: a fresh run or no run directory)
    stored_run: dict[str, Any] | None
    run_spec: RunSpec


def plan_evaluate(target: Any, data: Any, cfg: EvaluateSettings, *, lm: Any = None,
                  retriever: Any = None) -> EvaluatePlan:
    """Decide an evaluation run: cheapest checks first, each decision made here only.

    ``lm``: an LM object, a spec string or an :class:`LMSpec` (the spec is resolved now --
    ``$AMBIQA_LM`` read once -- and built only by the runner, after these checks).
    """
    cfg.check()
    kind: TargetKind = ("file" if is_file_target(target) else
                        "name" if isinstance(target, str | Path) else "object")
    cls = program_class(str(target)) if kind == "name" else None  # a typo names the nearest one
    examples, spec_text = load_data(data)
    _check_not_empty(examples, spec_text)
    extra = dict(cfg.extra)
    if cfg.part:
        examples, part = part_of(examples, cfg.part)
        extra.update(part)
        _check_not_empty(examples, f"{spec_text or 'the data'}, part {cfg.part},")
    names = metric_names(cfg.metrics, examples)
    label = target_label(target)
    config = dict(cfg.program_config or {})
    # a program file is read and validated once, here, and refused now (before the LM
    # loads) if it needs a retriever it cannot have; the same read gives its sha256
    pf = read_program_file(target) if kind == "file" else None
    if pf is not None:
        pf.check_start(given=retriever is not None or cfg.index is not None,
                       config=config or None)
    the_lm = LMSpec.of(lm).resolved() if isinstance(lm, str | LMSpec) else lm
    lm_label = cfg.lm_label if cfg.lm_label is not None else (
        the_lm.name if isinstance(the_lm, LMSpec) else None)
    out = Path(cfg.out) if cfg.out is not None else None
    run_spec = RunSpec(program=label, data=spec_text or f"<{len(examples)} examples>",
                       metrics=names, lm=lm_label, index=cfg.index,
                       program_config=config or None,
                       artifact_sha256=pf.sha256 if pf is not None else None, extra=extra,
                       endpoint=cfg.endpoint_label, program_defaults=_defaults_of(cls))
    stored = None
    if out is not None:
        stored = check_run_dir(out, run_spec, cfg.resume,
                               skip=frozenset({"reader", "judge", "index_fingerprint"}))
        ensure_writable_dir(out)
    return EvaluatePlan(settings=cfg, target=target, kind=kind, label=label,
                        program_class=cls, program_file=pf, examples=tuple(examples),
                        data_label=run_spec.data, metrics=tuple(names), lm=the_lm,
                        retriever=retriever, out=out, stored_run=stored, run_spec=run_spec)


# --- the decisions' pieces (also used by compile and tune) -----------------------------------

def data_spec(data: Any) -> str | None:
    """The spec string of ``data`` (None for in-memory examples); a bare ``.jsonl`` path is
    read as a plain question file (``jsonl:PATH``)."""
    if isinstance(data, Path) or (isinstance(data, str) and _bare_path(data)):
        return f"jsonl:{data}"
    return data if isinstance(data, str) else None


def _bare_path(text: str) -> bool:
    name = text.split(":", 1)[0].lower()
    known = name in DATASETS or name in ALIASES or name in ("demo", PLAIN)
    return not known and text.lower().endswith((".jsonl", ".jsonl.gz", ".ndjson"))


def load_data(data: Any) -> tuple[list[Any], str | None]:
    """``(examples, spec)`` for a spec, a question-file path or a list of examples/dicts."""
    spec = data_spec(data)
    if spec is not None:
        return load_dataset(spec), spec
    if isinstance(data, list | tuple):
        import dspy  # in-memory examples only: their callers already loaded DSPy

        out = [ex if isinstance(ex, dspy.Example) else make_example(dict(ex)) for ex in data]
        if any("question" not in ex for ex in out):
            raise ConfigError("every example needs a 'question' field")
        return out, None
    raise ConfigError(f"data must be a spec (asqa:dev:50, jsonl:PATH), a .jsonl path or a list "
                      f"of examples; got {type(data).__name__}")


def metric_names(metrics: Any, examples: list[Any]) -> list[str]:
    """Canonical metric names (DR brings its parts); None: the ones the data's fields allow.
    A comma string is split here, so the CLI passes ``--metrics`` as typed."""
    if metrics is None:
        names = metrics_for(examples)
    else:
        names = [m.strip() for m in (metrics.split(",") if isinstance(metrics, str) else metrics)
                 if str(m).strip()]
    if not names:
        raise ConfigError("no metrics given", hint="e.g. metrics=['str-em', 'rouge-l', 'd-f1']")
    for name in names:
        get_metric(name)  # unknown names fail here, naming the closest one
    return with_set_parts([canonical_name(n) for n in names])


def _check_not_empty(examples: list[Any], label: str | None) -> None:
    """Refuse data with no example: scoring nothing gave metrics ``nan`` and exit 0, a
    result that looks like one (issue 42)."""
    if not examples:
        raise DataError(f"{label or 'the data'} holds no examples: nothing to evaluate",
                        hint="check the file (one JSON object per line) or the :N in the spec")


def target_label(target: Any) -> str:
    """What ``run.json`` calls the program: the name or path as given, else the object's
    ``name`` (or its class name)."""
    if isinstance(target, str | Path):
        return str(target)
    return str(getattr(target, "name", type(target).__name__))


def _defaults_of(cls: type | None) -> dict[str, Any] | None:
    """The defaults of a program class's settings, for a resume's comparison with a
    ``run.json`` written before a setting existed; None without a class."""
    if cls is None:
        return None
    try:
        return cls.config_class().to_dict()
    except Exception:  # a class without a config: compare as stored
        return None


def program_defaults(label: str) -> dict[str, Any] | None:
    """The defaults of the settings of the program ``label`` names; None for an artifact or
    an unknown name."""
    try:
        cls = program_class(label)
    except ConfigError:  # an artifact path or a program object's odd name
        return None
    return _defaults_of(cls)
