"""The library's verbs: ``evaluate``, ``compile``, ``tune``, ``export``.

Each takes a settings dataclass or keywords (``ambiqa.evaluate("diva", "jsonl:q.jsonl",
metrics=["em"], threads=2)`` is ``ambiqa.evaluate("diva", "jsonl:q.jsonl",
EvaluateSettings(metrics=["em"], threads=2))``) and returns a typed result. The CLI builds
these settings from its flags and prints the results; benchmark scripts call them directly.

The LM: pass ``lm=`` (a ``dspy.LM``, a spec such as ``"embedded:qwen2.5-coder-0.5b"``, or an
:class:`~ambiqa.lm.factory.LMSpec` carrying the endpoint flags too; a spec is built once, after
the verb's cheap checks); without one the LM DSPy is configured with is used
(``dspy.configure(lm=...)`` or ``ambiqa.configure(...)``). Targets (program name, artifact, a
program's own ``.save()`` JSON, a module) are resolved by :func:`ambiqa.api.targets.resolve`
(a file through the one loader, :mod:`ambiqa.api.loader`); data is a spec (``asqa:dev:50``,
``jsonl:my_questions.jsonl``), a path to a ``.jsonl`` question file, or a list of
``dspy.Example`` / dicts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.api.indexing import settings_from
from ambiqa.api.loader import open_program
from ambiqa.api.plan import (
    EvaluatePlan,
    EvaluateSettings,
    data_spec,
    load_data,
    metric_names,
    plan_evaluate,
    program_defaults,
    target_label,
)
from ambiqa.api.targets import Target, build_named, resolve
from ambiqa.data import parse_spec
from ambiqa.errors import ConfigError
from ambiqa.evaluation.reader import make_reader as _make_reader
from ambiqa.evaluation.reader import reader_identity, stand_in_note
from ambiqa.evaluation.registry import (
    NEEDS_READER,
    dspy_metric,
    get_metric,
    judge_name,
    with_set_parts,
)
from ambiqa.evaluation.reports.report import write_run_report
from ambiqa.evaluation.runs.run_dir import data_fingerprint, lm_settings
from ambiqa.evaluation.runs.runner import evaluate as run_evaluation
from ambiqa.fsutil import atomic_write_text
from ambiqa.lm import configure, lm_id
from ambiqa.lm.factory import LMSpec
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

__all__ = ["CompileResult", "CompileSettings", "EvaluatePlan", "EvaluateResult",
           "EvaluateSettings", "ExportResult", "ExportSettings", "LMSpec", "compile", "data_spec",
           "evaluate", "export", "export_target", "load_data", "make_reader", "metric_fns",
           "metric_names", "plan_evaluate", "run_plan", "target_label", "tune", "use_lm"]


# --- shared steps ----------------------------------------------------------------------------

def use_lm(lm: Any) -> Any:
    """Configure ``lm`` with ambiqa tracing and return it: an LM object, a spec string or an
    :class:`~ambiqa.lm.factory.LMSpec` (built here, once, after the caller's cheap checks);
    None keeps DSPy's current LM."""
    import dspy

    if lm is None:
        if dspy.settings.get("lm") is None:
            raise ConfigError("no LM configured",
                              hint="pass lm=ambiqa.make_lm() (or a spec such as "
                                   "'openai/gpt-4o-mini'), or call dspy.configure(lm=...)")
        return dspy.settings.get("lm")
    if isinstance(lm, str | LMSpec):
        lm = LMSpec.of(lm).build()
    return configure(lm)


def metric_fns(names: list[str], reader: Any, *, expanded: bool = False) -> dict[str, Any]:
    """Each metric bound to ``reader``; ``expanded``: ``names`` already hold the set-level
    parts (a plan's metrics), so they are not worked out again."""
    import functools

    return {name: functools.partial(get_metric(name), reader=reader)
            for name in (names if expanded else with_set_parts(list(names)))}


# --- evaluate --------------------------------------------------------------------------------

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


def evaluate(target: Any, data: Any, settings: EvaluateSettings | None = None, *,
             lm: Any = None, retriever: Any = None, **overrides: Any) -> EvaluateResult:
    """Run ``target`` on ``data`` and score it (see the module docstring for the arguments).

    The settings become one frozen :class:`~ambiqa.api.plan.EvaluatePlan`
    (:func:`~ambiqa.api.plan.plan_evaluate`: everything that needs no model is checked
    first, so a typo costs a second, not an LM load, and never touches results already
    written), which :func:`run_plan` executes. ``lm``: an LM object, a spec string or an
    :class:`~ambiqa.lm.factory.LMSpec`, built only once those checks passed (the CLI passes
    its flags as a spec); None uses DSPy's configured LM.
    """
    cfg = settings_from(settings, EvaluateSettings, overrides)
    return run_plan(plan_evaluate(target, data, cfg, lm=lm, retriever=retriever))


def run_plan(plan: EvaluatePlan) -> EvaluateResult:
    """Execute ``plan``: open the program (its index fingerprint may still be refused)
    before the LM loads, build the LM, run and score. Decides nothing the plan decided."""
    cfg = plan.settings
    program = open_planned(plan)
    lm = use_lm(plan.lm)
    reader = make_reader(cfg.reader)
    extra = plan.run_spec.extra
    if NEEDS_READER & set(plan.metrics):
        extra = {**extra, "reader_identity": reader_identity(reader)}
        note = stand_in_note(reader, explicit=bool(cfg.reader))
        if note:
            log.warning(note)
    examples = list(plan.examples)
    # what only the built LM knows (max tokens, temperature, endpoint: they change answers)
    # read from the LM this run built, never back from DSPy's settings; the data's
    # fingerprint last (a --part recorded the whole data set's already)
    lm_fields = {k: v for k, v in lm_settings(lm).items() if getattr(plan.run_spec, k) is None}
    if "data_sha" not in extra:
        extra = {**extra, **data_fingerprint(examples)}
    spec = dataclasses.replace(plan.run_spec, reader=getattr(reader, "name", None),
                               judge=judge_name(list(plan.metrics)),
                               index_fingerprint=_fingerprint(program), extra=extra,
                               **lm_fields)

    def warm_up_first() -> None:
        # what the first question would load in silence (the encoder, a ColBERT searcher),
        # loaded before it and said on stderr with its duration, as `ask` and `serve` do
        # (issue 42); not at all when a resume finds nothing left to ask
        if cfg.progress:
            warm_up(program)

    summary = run_evaluation(program, examples,
                             metric_fns(list(plan.metrics), reader, expanded=True),
                             out_dir=plan.out, spec=spec, resume=cfg.resume,
                             threads=cfg.threads, max_error_rate=cfg.max_error_rate,
                             timeout_s=cfg.timeout_s, retry_errors=cfg.retry_errors,
                             progress=cfg.progress, report=write_run_report,
                             spec_complete=True, before_first=warm_up_first)
    return EvaluateResult(summary, spec, plan.out, program)


def say_on_stderr(line: str) -> None:
    """One ``ambiqa: ...`` progress line on stderr (stdout stays the answer's)."""
    print(f"ambiqa: {line}", file=sys.stderr, flush=True)


def warm_up(program: Any, say: Any = say_on_stderr) -> None:
    """Load what the program's first question would load in silence (the encoder, a ColBERT
    searcher), saying each with its duration (issue 42); programs without one skip it."""
    load = getattr(program, "warm_up", None)
    if callable(load):
        load(say=say)


def open_planned(plan: EvaluatePlan) -> Any:
    """The plan's program: a file through the one loader (read already), a name through its
    class (looked up already), an object as it is."""
    cfg = plan.settings
    if plan.program_file is not None:
        return open_program(plan.program_file, retriever=plan.retriever, index=cfg.index,
                            index_root=cfg.index_root).program
    if plan.program_class is not None:
        return build_named(plan.program_class, str(plan.target).strip().lower()
                           .replace("-", "_"), retriever=plan.retriever, index=cfg.index,
                           index_root=cfg.index_root,
                           config=cfg.program_config or None).program
    return resolve(plan.target, retriever=plan.retriever, index=cfg.index,
                   index_root=cfg.index_root, config=cfg.program_config or None).program


def make_reader(checkpoint: str | None) -> Any:
    return _make_reader(checkpoint)


def _program_defaults(label: str) -> dict[str, Any] | None:
    """Kept for callers of the old name: :func:`ambiqa.api.plan.program_defaults`."""
    return program_defaults(label)


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
    force: bool | str = False


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
            **overrides: Any) -> CompileResult:
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
    lm = use_lm(lm)  # a spec is built here, after the checks above
    reader = reader if reader is not None else make_reader(cfg.reader)
    examples, spec = load_data(train_data)
    trainset = usable_examples(examples, recipe, metric, spec or "the training examples")
    devset, dev_spec = load_data(cfg.dev) if cfg.dev is not None else (None, None)
    say = console.print if console is not None else log.info
    note = stand_in_note(reader, explicit=bool(cfg.reader)) if metric in NEEDS_READER else None
    if note:
        say(note)
    warm_up(prog, say)
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
                                       force=cfg.force, metric_name=metric, say=say,
                                       **cfg.options)
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
        if report.selection_answers:
            side = path.with_name(path.stem + ".selection.jsonl")
            atomic_write_text(side, "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                            for r in report.selection_answers))
            say(f"wrote {side}: each candidate's answer to each validation question")
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
