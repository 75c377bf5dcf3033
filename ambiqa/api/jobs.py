"""The library's verbs: ``evaluate``, ``compile``, ``tune``, ``export``.

Each takes a settings dataclass or keywords (``ambiqa.evaluate("diva", "jsonl:q.jsonl",
metrics=["em"], threads=2)`` is ``ambiqa.evaluate("diva", "jsonl:q.jsonl",
EvaluateSettings(metrics=["em"], threads=2))``) and returns a typed result. The CLI builds
these settings from its flags and prints the results; benchmark scripts call them directly.

The LM: pass ``lm=`` (a ``dspy.LM`` or a spec such as ``"embedded:qwen2.5-coder-0.5b"``); without
one the LM DSPy is configured with is used (``dspy.configure(lm=...)`` or
``ambiqa.configure(...)``). Targets (program name, artifact, a program's own ``.save()``
JSON, a module) are resolved by :func:`ambiqa.api.targets.resolve` (a file through the one
loader, :mod:`ambiqa.api.loader`); data is a spec
(``asqa:dev:50``, ``jsonl:my_questions.jsonl``), a path to a ``.jsonl`` question file, or a list
of ``dspy.Example`` / dicts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.api.indexing import settings_from
from ambiqa.api.loader import open_program, read_program_file
from ambiqa.api.targets import Target, check_target, is_file_target, resolve
from ambiqa.checks import check_int
from ambiqa.data import load_dataset, metrics_for, parse_spec
from ambiqa.data.loaders.common import make_example
from ambiqa.data.specs import ALIASES, DATASETS, PLAIN
from ambiqa.errors import ConfigError, DataError
from ambiqa.evaluation.reader import make_reader as _make_reader
from ambiqa.evaluation.reader import reader_identity, stand_in_note
from ambiqa.evaluation.registry import (
    NEEDS_READER,
    canonical_name,
    dspy_metric,
    get_metric,
    judge_name,
    with_set_parts,
)
from ambiqa.evaluation.reports.report import write_run_report
from ambiqa.evaluation.runs.parts import part_of
from ambiqa.evaluation.runs.runner import RunSpec, check_run_dir, ensure_writable_dir
from ambiqa.evaluation.runs.runner import evaluate as run_evaluation
from ambiqa.fsutil import atomic_write_text
from ambiqa.lm import configure, lm_id, make_lm
from ambiqa.optimizers.artifact import save_artifact
from ambiqa.optimizers.budget import Budget
from ambiqa.optimizers.compile import compile_program
from ambiqa.optimizers.export import export_prompts, render
from ambiqa.optimizers.manifest import Manifest
from ambiqa.optimizers.recipes import check_teleprompter, get_recipe, usable_examples
from ambiqa.optimizers.splits import check_training_data
from ambiqa.optimizers.tune import TuneConfig
from ambiqa.optimizers.tune import tune as run_tune
from ambiqa.programs.registry import program_class
from ambiqa.retrieval.factory import describe

log = logging.getLogger(__name__)


# --- shared steps ----------------------------------------------------------------------------

def use_lm(lm: Any) -> Any:
    """Configure ``lm`` (an LM or a spec) with ambiqa tracing; None keeps DSPy's current LM."""
    import dspy

    if lm is None:
        if dspy.settings.get("lm") is None:
            raise ConfigError("no LM configured",
                              hint="pass lm=ambiqa.make_lm() (or a spec such as "
                                   "'openai/gpt-4o-mini'), or call dspy.configure(lm=...)")
        return dspy.settings.get("lm")
    return configure(make_lm(lm) if isinstance(lm, str) else lm)


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
        import dspy

        out = [ex if isinstance(ex, dspy.Example) else make_example(dict(ex)) for ex in data]
        if any("question" not in ex for ex in out):
            raise ConfigError("every example needs a 'question' field")
        return out, None
    raise ConfigError(f"data must be a spec (asqa:dev:50, jsonl:PATH), a .jsonl path or a list "
                      f"of examples; got {type(data).__name__}")


def metric_names(metrics: Any, examples: list[Any]) -> list[str]:
    """Canonical metric names (DR brings its parts); None: the ones the data's fields allow."""
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


def metric_fns(names: list[str], reader: Any) -> dict[str, Any]:
    import functools

    return {name: functools.partial(get_metric(name), reader=reader)
            for name in with_set_parts(list(names))}


# --- evaluate --------------------------------------------------------------------------------

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
    #: what run.json records as the LM (default: the spec passed as ``lm``, if a string)
    lm_label: str | None = None
    #: ``I/N``: only the I-th of N contiguous slices of the data (``ambiqa merge`` joins them)
    part: str | None = None
    progress: bool = False
    #: extra RunSpec settings (recorded in run.json; a resume must match them)
    extra: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        check_int("threads", self.threads, 1)
        if self.timeout_s is not None and not 0 < self.timeout_s < float("inf"):
            # not "<= 0": nan passes that test and inf overflows the timer (issue 42)
            raise ConfigError(f"timeout_s must be a finite number of seconds above 0, "
                              f"got {self.timeout_s}")
        if not 0.0 <= self.max_error_rate <= 1.0:
            raise ConfigError(f"max_error_rate must be within [0, 1], got {self.max_error_rate}")
        if self.resume and self.out is None:
            raise ConfigError("resume needs a run directory", hint="pass out=DIR")


@dataclass
class EvaluateResult:
    """What an evaluation measured: ``summary`` as summary.json holds it, and the run spec."""

    summary: dict[str, Any]
    spec: Any
    out: Path | None
    program: Any

    @property
    def metrics(self) -> dict[str, float]:
        """Each metric's mean (failed examples count as 0)."""
        return {name: m["mean"] for name, m in self.summary["metrics"].items()}

    @property
    def n(self) -> int:
        return int(self.summary["n"])


def _check_not_empty(examples: list[Any], label: str | None) -> None:
    """Refuse data with no example: scoring nothing gave metrics ``nan`` and exit 0, a
    result that looks like one (issue 42)."""
    if not examples:
        raise DataError(f"{label or 'the data'} holds no examples: nothing to evaluate",
                        hint="check the file (one JSON object per line) or the :N in the spec")


def evaluate(target: Any, data: Any, settings: EvaluateSettings | None = None, *,
             lm: Any = None, retriever: Any = None, make_lm: Callable[[], Any] | None = None,
             **overrides: Any) -> EvaluateResult:
    """Run ``target`` on ``data`` and score it (see the module docstring for the arguments).

    Everything that needs no model is checked first (settings, metric names, program name,
    data, the run directory and whether it may be resumed into), so a typo costs a second,
    not an LM load, and never touches results already written. ``make_lm``: builds the LM
    only once those checks passed (the CLI loads its model this way).
    """
    cfg = settings_from(settings, EvaluateSettings, overrides)
    cfg.check()
    check_target(target)
    examples, spec_text = load_data(data)
    _check_not_empty(examples, spec_text)
    extra = dict(cfg.extra)
    if cfg.part:
        examples, part = part_of(examples, cfg.part)
        extra.update(part)
        _check_not_empty(examples, f"{spec_text or 'the data'}, part {cfg.part},")
    names = metric_names(cfg.metrics, examples)
    label = _target_label(target)
    out = Path(cfg.out) if cfg.out is not None else None
    lm_label = cfg.lm_label if cfg.lm_label is not None else (lm if isinstance(lm, str) else None)
    config = dict(cfg.program_config or {})
    # a program file is read and validated once, here, and refused now (before the LM
    # loads) if it needs a retriever it cannot have; the same read gives its sha256
    pf = read_program_file(target) if is_file_target(target) else None
    if pf is not None:
        pf.check_start(given=retriever is not None or cfg.index is not None,
                       config=config or None)
    artifact_sha = pf.sha256 if pf is not None else None
    data_label = spec_text or f"<{len(examples)} examples>"
    if out is not None:
        draft = RunSpec(program=label, data=data_label, metrics=names, lm=lm_label,
                        index=cfg.index, program_config=config or None,
                        artifact_sha256=artifact_sha, extra=extra,
                        program_defaults=_program_defaults(label))
        check_run_dir(out, draft, cfg.resume,
                      skip=frozenset({"reader", "judge", "index_fingerprint"}))
        ensure_writable_dir(out)
    # the program (and its index, whose fingerprint may be refused) before the LM loads
    if pf is not None:
        found = open_program(pf, retriever=retriever, index=cfg.index,
                             index_root=cfg.index_root)
    else:
        found = resolve(target, retriever=retriever, index=cfg.index,
                        index_root=cfg.index_root, config=config or None)
    use_lm(make_lm() if make_lm is not None and lm is None else lm)
    reader = make_reader(cfg.reader)
    if NEEDS_READER & set(names):
        extra = {**extra, "reader_identity": reader_identity(reader)}
        note = stand_in_note(reader, explicit=bool(cfg.reader))
        if note:
            log.warning(note)
    spec = RunSpec(program=label, data=data_label, metrics=names,
                   reader=getattr(reader, "name", None), lm=lm_label, index=cfg.index,
                   program_config=config or None, judge=judge_name(names),
                   artifact_sha256=artifact_sha,
                   index_fingerprint=_fingerprint(found.program), extra=extra,
                   program_defaults=_program_defaults(label))
    summary = run_evaluation(found.program, examples, metric_fns(names, reader), out_dir=out,
                             spec=spec, resume=cfg.resume, threads=cfg.threads,
                             max_error_rate=cfg.max_error_rate, timeout_s=cfg.timeout_s,
                             retry_errors=cfg.retry_errors, progress=cfg.progress,
                             report=write_run_report)
    return EvaluateResult(summary, spec, out, found.program)


def make_reader(checkpoint: str | None) -> Any:
    return _make_reader(checkpoint)


def _target_label(target: Any) -> str:
    if isinstance(target, str | Path):
        return str(target)
    return str(getattr(target, "name", type(target).__name__))


def _program_defaults(label: str) -> dict[str, Any] | None:
    """The defaults of the settings of the program ``label`` names (its config class), for a
    resume's comparison with a ``run.json`` written before a setting existed; None for an
    artifact or an unknown name."""
    try:
        return program_class(label).config_class().to_dict()
    except Exception:  # an artifact path or a program object's odd name: compare as stored
        return None


def _fingerprint(program: Any) -> str | None:
    """The program's retriever fingerprint (None for programs without a retriever)."""
    fp = getattr(getattr(program, "retriever", None), "fingerprint", None)
    return str(fp) if isinstance(fp, str) and fp else None


# --- compile ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class CompileSettings:
    """How to compile. ``train``/``metric`` default to the program's recipe."""

    #: a training spec, a .jsonl question file, or a list of examples (None: the recipe's)
    train: Any = None
    #: a held-out spec or examples to score the result on (never trained on)
    dev: Any = None
    metric: str | None = None
    #: none, labeled, bootstrap, bootstrap-rs, knn, mipro (see ambiqa.optimizers.compile)
    optimizer: str = "bootstrap"
    #: demos per predictor
    k: int = 2
    seed: int = 0
    threshold: float | None = None
    reader: str | None = None
    #: where to write the artifact (None: not written)
    out: str | Path | None = None
    max_lm_calls: int | None = None
    allow_eval_splits: bool = False
    #: extra teleprompter settings passed to compile_program (num_candidates, mipro_trials,
    #: knn_pool, knn_gold_only, n_val, threads, ...)
    options: dict[str, Any] = field(default_factory=dict)
    #: settings for a program given by name
    program_config: dict[str, Any] | None = None
    index: str | None = None
    index_root: str | Path | None = None
    #: per-predictor demos after the teleprompter, e.g. "verify=signal:2,write=none"
    #: (:mod:`ambiqa.optimizers.demo_plan`)
    demos: str | dict[str, Any] | None = None
    #: choose on a validation split carved from the training data: zero-shot, the input
    #: program, the result and ``candidates`` compete; zero-shot ships unless beaten
    select: bool = True
    #: validation questions for the choice (default a third of the training data, at most 20)
    select_val: int | None = None
    #: demo plans tried on top of the result (None: the program's default variants)
    candidates: list[Any] | None = None
    #: ship the teleprompter's result even when it loses on the validation split
    force: bool = False


@dataclass
class CompileResult:
    """The compiled program, its manifest (as the artifact records it) and the report."""

    program: Any
    manifest: dict[str, Any]
    report: Any
    path: Path | None

    @property
    def scores(self) -> dict[str, Any]:
        return dict(self.manifest.get("scores") or {})


def compile(program: Any, train: Any = None, settings: CompileSettings | None = None, *,
            lm: Any = None, retriever: Any = None, reader: Any = None, console: Any = None,
            make_lm: Callable[[], Any] | None = None, **overrides: Any) -> CompileResult:
    """Compile ``program`` (a name or a program object) on ``train``; save when ``out`` is set.

    ``ambiqa.compile(ambiqa.Diva(retriever=fn), "questions.jsonl", optimizer="labeled",
    out="diva.json")``. ``reader``: a D-F1 reader object (else ``settings.reader`` names
    one). Training data must be a training split: dev/test specs, files named dev/test/...
    and questions shared with ``dev`` are refused (``allow_eval_splits`` is for research only
    and is recorded in the manifest).
    """
    if train is not None:
        overrides["train"] = train
    cfg = settings_from(settings, CompileSettings, overrides)
    check_teleprompter(cfg.optimizer)
    name = program if isinstance(program, str) else getattr(program, "name", "")
    recipe = get_recipe(name)
    metric = cfg.metric or recipe.metric
    train_data = cfg.train if cfg.train is not None else recipe.train
    spec = data_spec(train_data)
    if spec is not None:
        parse_spec(spec)  # a bad spec fails before any model loads
        check_training_data(spec=spec, allow_eval_splits=cfg.allow_eval_splits)
    if isinstance(cfg.dev, str):
        parse_spec(data_spec(cfg.dev) or cfg.dev)
    if isinstance(program, str):
        found = resolve(program, retriever=retriever, index=cfg.index,
                        index_root=cfg.index_root, config=cfg.program_config)
        prog = found.program
    else:
        prog = program
    lm = use_lm(make_lm() if make_lm is not None and lm is None else lm)
    reader = reader if reader is not None else make_reader(cfg.reader)
    examples, spec = load_data(train_data)
    trainset = usable_examples(examples, recipe, metric, spec or "the training examples")
    devset, dev_spec = load_data(cfg.dev) if cfg.dev is not None else (None, None)
    say = console.print if console is not None else log.info
    note = stand_in_note(reader, explicit=bool(cfg.reader)) if metric in NEEDS_READER else None
    if note:
        say(note)
    say(f"compiling {name} with {cfg.optimizer} on {spec or 'the given examples'} "
        f"({len(trainset)} usable examples), metric {metric}")
    if cfg.optimizer == "bootstrap" and cfg.threshold is None:
        # seen in practice: the first k traces scoring above 0 became the demos whatever
        # the objective (benchmarks/results/compile-v3/README.md)
        say(f"note: bootstrap keeps the first {cfg.k} traces that score above 0 on {metric}; "
            "pass --threshold, or use bootstrap-rs, to let the metric choose between them")
    compiled, report = compile_program(prog, trainset, optimizer=cfg.optimizer,
                                       metric=dspy_metric(metric, reader=reader), k=cfg.k,
                                       seed=cfg.seed, threshold=cfg.threshold,
                                       budget=Budget(cfg.max_lm_calls), train_spec=spec,
                                       devset=devset, dev_spec=dev_spec,
                                       allow_eval_splits=cfg.allow_eval_splits,
                                       demos=cfg.demos, select=cfg.select,
                                       select_val=cfg.select_val, candidates=cfg.candidates,
                                       force=cfg.force, metric_name=metric, **cfg.options)
    selection = report.settings.get("selection") or {}
    if selection.get("reason") or selection.get("skipped"):
        say(selection.get("reason") or f"not checked against zero-shot: {selection['skipped']}")
    scores: dict[str, Any] = {"train": report.val_score}
    if report.val_score is not None:
        scores["train_note"] = "held-out part of the training split"
    if devset is not None:
        say(f"scoring on {dev_spec or 'the dev examples'} ({len(devset)} examples)")
        summary = run_evaluation(compiled, devset, metric_fns([metric], reader), progress=False,
                                 threads=cfg.options.get("threads", 1))
        scores["dev"] = summary["metrics"][metric]["mean"]
        scores["dev_n"] = summary["n"]
    settings_used = {k_: v for k_, v in report.settings.items() if v is not None}
    manifest = Manifest(
        program=name,
        program_config=compiled.config() if hasattr(compiled, "config") else {},
        lm=lm_id(lm),
        retriever=describe(getattr(compiled, "retriever", None)),
        metric=metric,
        reader=getattr(reader, "name", None),
        train=spec,
        dev=dev_spec,
        scores=scores,
        optimizer={"name": cfg.optimizer, **settings_used,
                   "stopped_by_budget": report.stopped_by_budget,
                   "nan_scores": report.nan_scores,
                   **({"candidates": report.candidates} if report.candidates else {})},
        optuna=None,
        demos_per_predictor=report.demos_per_predictor,
        compile_cost=report.cost,
        data_guard=report.data_guard,
    ).to_dict()
    path = None
    if cfg.out is not None:
        path = save_artifact(Path(cfg.out), compiled, manifest)
        budget_note = " (stopped at the LM-call budget)" if report.stopped_by_budget else ""
        say(f"wrote {path}: demos per predictor {report.demos_per_predictor}, dev {metric} = "
            f"{scores.get('dev', float('nan')):.3f}, {report.cost['lm_calls']} LM calls"
            + budget_note)
    compiled.manifest = manifest
    return CompileResult(compiled, manifest, report, path)


# --- tune ------------------------------------------------------------------------------------

def tune(program: str, settings: Any = None, *, lm: Any = None, retriever: Any = None,
         reader: Any = None, out: str | Path | None = None, progress: Any = None,
         **overrides: Any) -> Any:
    """Optuna search over demos, teleprompter and program knobs (``ambiqa tune``).

    ``settings`` is an :class:`ambiqa.optimizers.tune.TuneConfig` (or keywords: ``study``,
    ``storage``, ``trials``...); ``train``/``metric`` default to the recipe's. Returns the
    :class:`~ambiqa.optimizers.tune.TuneResult`; the best trial is written to ``out``.
    ``reader``: the D-F1 reader, an object or a spec (None: the default reader).
    """
    overrides.setdefault("program", program)
    recipe = get_recipe(program)
    if settings is None:
        overrides.setdefault("train", recipe.train)
        overrides.setdefault("metric", recipe.metric)
    cfg = settings_from(settings, TuneConfig, overrides)
    cfg.check(recipe)
    spec = data_spec(cfg.train) or cfg.train
    check_training_data(spec=spec, allow_eval_splits=cfg.allow_eval_splits)
    cls = program_class(program)
    if retriever is None and getattr(cls, "needs_retriever", True):
        raise ConfigError(f"program {program!r} needs a retriever",
                          hint="pass retriever=ambiqa.open_index(NAME)")
    use_lm(lm)
    if reader is None or isinstance(reader, str):
        reader = make_reader(reader)
    examples, _ = load_data(spec)
    return run_tune(cfg, examples, dspy_metric(cfg.metric, reader=reader),
                    retriever=retriever, out=out, progress=progress)


# --- export ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExportSettings:
    #: md (readable), json (messages per predictor) or jinja (one macro per predictor)
    format: str = "md"
    #: write the text here (None: only returned)
    out: str | Path | None = None


@dataclass
class ExportResult:
    text: str
    prompts: list[dict[str, Any]]
    manifest: dict[str, Any]
    path: Path | None


def export(target: Any, settings: ExportSettings | None = None, **overrides: Any
           ) -> ExportResult:
    """Render a compiled program's prompts (no LM, no index needed).

    ``target``: an artifact, a saved program, a program object, or a bare program name (its
    uncompiled, zero-shot prompts, marked as such).
    """
    cfg = settings_from(settings, ExportSettings, overrides)
    if cfg.format not in ("md", "json", "jinja"):
        raise ConfigError(f"unknown export format {cfg.format!r}", hint="md, json or jinja")
    found = export_target(target)
    prompts = export_prompts(found.program)
    text = render(prompts, cfg.format, manifest=found.manifest)
    path = None
    if cfg.out is not None:
        path = Path(cfg.out)
        atomic_write_text(path, text)
    return ExportResult(text, prompts, dict(found.manifest or {}), path)


def export_target(target: Any) -> Target:
    """The program to export: predictors only, no index opened."""
    found = resolve(target, with_index=False)
    if found.manifest is None:
        found.manifest = {"program": found.name, "optimizer": {"name": "none"}, "metric": None,
                          "reader": None, "lm": None, "created": None}
    return found
