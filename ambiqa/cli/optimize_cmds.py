"""Optimization commands: ``compile``, ``tune``, ``tune-eor`` and ``export``.

``compile`` and ``tune`` take their metric and training split from the program's recipe
(:mod:`ambiqa.optimizers.recipes`) unless given, refuse dev/test splits, and accept
``--dry-run`` (estimate LM calls and tokens from a sample run, then stop) and
``--max-lm-calls`` (stop cleanly at the budget, keeping the best so far).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ambiqa.checks import check_int
from ambiqa.cli.common import (
    PROGRAM_CONFIG_HELP,
    PROGRAM_HELP,
    READER_HELP,
    add_index_args,
    add_lm_args,
    at_least,
    lm_from_args,
    make_console,
    program_config,
    program_or_artifact,
    reader_from_args,
    retriever_from_args,
)
from ambiqa.errors import ConfigError
from ambiqa.fsutil import atomic_write_text
from ambiqa.optimizers.demo_plan import parse_plan
from ambiqa.optimizers.recipes import (
    TUNE_TELEPROMPTERS,
    get_recipe,
    split_train,
    teleprompter_names,
    usable_examples,
)
from ambiqa.programs.registry import build_program, program_class


def _require_training(spec: str, allow_eval_splits: bool = False) -> None:
    """Fail fast (before any model loads) on a spec that is not a training split; the API
    (:func:`ambiqa.optimizers.splits.check_training_data`) checks again on the examples."""
    from ambiqa.data import parse_spec
    from ambiqa.optimizers.splits import check_training_data

    parse_spec(spec)  # a bad spec fails here, before any model is loaded
    check_training_data(spec=spec, allow_eval_splits=allow_eval_splits)


def compile_and_save(program_name: str, train_spec: str, dev_spec: str | None, metric: str,
             optimizer: str, k: int, seed: int, retriever: Any, lm: Any, reader: Any,
             out: Path, config: dict[str, Any], threshold: float | None,
             console: Any, *, options: dict[str, Any] | None = None,
             max_lm_calls: int | None = None,
             allow_eval_splits: bool = False,
             choice: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """Compile, score on dev, save: shared by ``compile`` and ``demo``; the work is
    :func:`ambiqa.api.compile`.

    ``options``: extra teleprompter settings (num_candidates, mipro_trials, knn_pool,
    threads); ``threads`` also sets the questions in flight while scoring on dev.
    ``choice``: the demo-plan and selection settings (demos, candidates, select, select_val,
    force); None keeps the defaults (choose on a validation split).
    """
    from ambiqa.api import CompileSettings
    from ambiqa.api import compile as compile_job

    _require_training(train_spec, allow_eval_splits)
    settings = CompileSettings(train=train_spec, dev=dev_spec, metric=metric,
                               optimizer=optimizer, k=k, seed=seed, threshold=threshold,
                               out=out, max_lm_calls=max_lm_calls,
                               allow_eval_splits=allow_eval_splits, options=dict(options or {}),
                               program_config=config or None, **(choice or {}))
    result = compile_job(program_name, settings=settings, lm=lm, retriever=retriever,
                         reader=reader, console=console)
    return result.program, result.manifest


def _dry_run(program_name: str, train_spec: str, metric: str, reader: Any, retriever: Any,
             config: dict[str, Any], sample: int, n_val_limit: int | None = None,
             choice: dict[str, Any] | None = None, **estimate_args: Any) -> dict[str, Any]:
    from ambiqa.data import load_dataset
    from ambiqa.evaluation.registry import dspy_metric
    from ambiqa.optimizers.estimate import estimate, sample_cost, training_passes
    program = build_program(program_name, retriever=retriever, **config)
    trainset = usable_examples(load_dataset(train_spec), get_recipe(program_name), metric,
                               train_spec)
    per_q = sample_cost(program, trainset[: max(1, sample)], dspy_metric(metric, reader=reader))
    n_select = 0
    if choice is not None and choice.get("select") and len(trainset) >= 3:
        n_select = min(len(split_train(trainset)[1]), choice.get("select_val") or 20)
        trainset = trainset[n_select:]
    variants: list[Any] = []
    if choice is not None and choice.get("candidates") is not None:
        variants = [parse_plan(text) for text in choice["candidates"]]
    elif choice is not None and per_q["writer_lm_calls"]:
        from ambiqa.optimizers.compile import DEFAULT_VARIANTS  # loads DSPy: not for --help

        variants = list(DEFAULT_VARIANTS)
    n_variants = len(variants)
    plan = parse_plan(choice.get("demos")) if choice is not None else None
    passes = training_passes(variants, plan,
                             bool(estimate_args.pop("predictor_signal", False)))
    n_val = len(split_train(trainset)[1]) if len(trainset) > 1 else 0
    n_train = len(trainset)
    if estimate_args.get("optimizer") in ("bootstrap-rs", "mipro", "tune"):
        n_train -= n_val
    if n_val_limit:
        n_val = min(n_val, n_val_limit)
    est = estimate(per_q, n_train=n_train, n_val=n_val,
                   n_predictors=len(list(program.named_predictors())), n_select=n_select,
                   variants=variants, passes=passes, program=program, **estimate_args)
    est.update(program=program_name, train=train_spec, n_train=n_train, n_val=n_val,
               n_select=n_select, n_variants=n_variants, training_passes=passes,
               note=f"estimate; the sample run itself spent "
                    f"{per_q['sample_lm_calls_spent']} LM calls")
    return est


def _choice_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The demo-plan and selection flags as :class:`ambiqa.api.CompileSettings` fields,
    parsed now so a bad plan fails before any model loads."""
    parse_plan(args.demos, default_k=args.k)
    if args.ship and args.no_select:
        raise ConfigError("--ship names a candidate of the choice; --no-select skips the choice",
                          hint="drop one of them")
    candidates = None
    if args.candidates is not None:
        candidates = [c.strip() for c in args.candidates.split(";") if c.strip()]
        for plan in candidates:
            parse_plan(plan, default_k=args.k)
    return {"demos": args.demos, "candidates": candidates, "select": not args.no_select,
            "select_val": args.select_val, "force": args.ship or args.force}


def cmd_compile(args: argparse.Namespace) -> int:
    cls = program_class(args.program)
    recipe = get_recipe(args.program)
    train = args.train or recipe.train
    metric = args.metric or recipe.metric
    _require_training(train, args.allow_eval_splits)
    check_int("--threads", args.threads, 1)  # before any model loads
    choice = _choice_settings(args)
    if args.dev:
        from ambiqa.data import parse_spec

        parse_spec(args.dev)
    retriever = retriever_from_args(args, needed=cls.needs_retriever)
    lm = lm_from_args(args)
    config = program_config(args)
    options = {"num_candidates": args.num_candidates, "mipro_trials": args.mipro_trials,
               "knn_pool": args.knn_pool, "knn_gold_only": args.knn_gold_only,
               "n_val": args.n_val, "threads": args.threads,
               "predictor_signal": args.predictor_signal, "reflection_lm": args.reflection_lm,
               "gepa_rollouts": args.gepa_rollouts, "gepa_auto": args.gepa_auto,
               "gepa_selector": args.gepa_selector,
               "reflection_minibatch": args.reflection_minibatch,
               "simba_steps": args.simba_steps, "simba_bsize": args.simba_bsize}
    if args.dry_run:
        est = _dry_run(args.program, train, metric, reader_from_args(args), retriever, config,
                       args.sample, n_val_limit=args.n_val, choice=choice,
                       optimizer=args.optimizer,
                       k=args.k, num_candidates=args.num_candidates, trials=args.mipro_trials,
                       n_dev=0, predictor_signal=args.predictor_signal)
        print(json.dumps(est, indent=2))
        return 0
    out = Path(args.out or f"artifacts/{args.program}.json")
    compile_and_save(args.program, train, args.dev, metric, args.optimizer, args.k,
                     args.seed, retriever, lm, reader_from_args(args), out,
                     config, args.threshold, make_console(), options=options,
                     max_lm_calls=args.max_lm_calls, allow_eval_splits=args.allow_eval_splits,
                     choice=choice)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from ambiqa.optimizers.tune import TuneConfig
    cls = program_class(args.program)
    recipe = get_recipe(args.program)
    train = args.train or recipe.train
    metric = args.metric or recipe.metric
    _require_training(train, args.allow_eval_splits)
    teleprompters = tuple(t.strip() for t in args.teleprompters.split(",") if t.strip())
    cfg = TuneConfig(program=args.program, study=args.study, storage=args.storage,
                     trials=args.trials, train=train, metric=metric, seed=args.seed,
                     teleprompters=teleprompters, max_demos=args.max_demos,
                     n_sets=args.n_sets, pool_size=args.pool_size, n_val=args.n_val,
                     cost_penalty=args.cost_penalty, cost_unit=args.cost_unit,
                     max_lm_calls=args.max_lm_calls, program_config=program_config(args),
                     tune_knobs=not args.no_knobs, allow_eval_splits=args.allow_eval_splits)
    cfg.check(recipe)
    retriever = retriever_from_args(args, needed=cls.needs_retriever)
    lm = lm_from_args(args)
    reader = reader_from_args(args)
    if args.dry_run:
        est = _dry_run(args.program, train, metric, reader, retriever, cfg.program_config,
                       args.sample, optimizer="tune", k=args.max_demos, trials=args.trials,
                       tune_pools=bool({"bootstrap", "knn"} & set(teleprompters)),
                       n_val_limit=args.n_val)
        print(json.dumps(est, indent=2))
        return 0
    console = make_console()
    out = Path(args.out or f"artifacts/{args.program}-tuned.json")

    def progress(trial: Any) -> None:
        value = "-" if trial.value is None else f"{trial.value:.4f}"
        console.print(f"trial {trial.number}: {trial.state.name.lower()} value {value} "
                      f"{json.dumps(trial.params)}")

    from ambiqa.api import tune as tune_job

    result = tune_job(args.program, cfg, lm=lm, retriever=retriever, reader=reader, out=out,
                      progress=progress)
    console.print(f"study {result.study}: {result.n_complete} complete trials "
                  f"({result.ran_trials} run now, {result.lm_calls} LM calls"
                  + (", stopped at the LM-call budget" if result.stopped_by_budget else "")
                  + f"); best trial {result.best_trial} value {result.best_value}")
    print(json.dumps(result.to_dict()))
    return 0


def cmd_tune_eor(args: argparse.Namespace) -> int:
    from ambiqa.api.eor import TuneEorSettings, tune_eor

    console = make_console()
    result = tune_eor(args.cache, TuneEorSettings(
        data=args.data, dev_cache=args.dev_cache, dev_data=args.dev_data, gold=args.gold,
        trials=args.trials, seed=args.seed, tune_threshold=args.tune_threshold,
        study=args.study, storage=args.storage, allow_eval_splits=args.allow_eval_splits,
        out=args.out, plot=args.plot, artifact=args.artifact))
    if result.skipped:
        console.print(f"read {result.n_train} questions from {args.cache}; skipped: "
                      + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in result.skipped.items()))
    console.print(result.table)
    for path in result.written:
        console.print(f"wrote {path}" + (" (load with ambiqa.load)"
                                         if str(path) == str(args.artifact) else ""))
    print(json.dumps({k: v for k, v in result.report.items() if k != "weights"}))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ambiqa.optimizers.export import export_prompts, render

    if args.verify:  # runs the program: loaded once, with its index (program_or_artifact)
        return _verify(args)
    program, manifest = load_for_export(args.artifact, with_manifest=True)
    text = render(export_prompts(program), args.format, manifest=manifest)
    if args.out:
        atomic_write_text(Path(args.out), text)
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


def _verify(args: argparse.Namespace) -> int:
    """Run the program on a few questions; for each predictor call check that the messages
    DSPy sent equal the exported prompt filled in (exact text), then send the filled export
    straight to the LM and compare parsed outputs."""
    from ambiqa.data import load_dataset
    from ambiqa.optimizers.export import capture_inputs, verify_export

    if not args.data:
        raise ConfigError("--verify needs questions: pass --data SPEC (e.g. asqa:dev:2)")
    questions = [ex.question for ex in load_dataset(args.data)][: args.n]
    program = program_or_artifact(args, args.artifact)  # refused before the LM loads
    lm = lm_from_args(args)
    captured = capture_inputs(program, questions)
    results = verify_export(program, captured, lm, via="jinja" if args.format == "jinja"
                            else "json")
    n_ok = sum(r["match"] for r in results)
    for r in results:
        prompt = "same prompt" if r["prompt_match"] else "DIFFERENT PROMPT"
        output = "same output" if r["output_match"] else "DIFFERENT OUTPUT"
        print(f"{r['predictor']}: {prompt}, {output}")
        if not r["prompt_match"]:
            print(f"  first difference: {r['prompt_difference']}")
        if not r["output_match"]:
            print(f"  exported prompt → {json.dumps(r['exported'], default=str)[:300]}")
            print(f"  DSPy module     → {json.dumps(r['dspy'], default=str)[:300]}")
    print(f"verified {n_ok}/{len(results)} predictor calls on {len(questions)} questions")
    return 0 if results and n_ok == len(results) else 1


def load_for_export(path: str, with_manifest: bool = False) -> Any:
    """Export needs the predictors, not the index: build the program without a retriever
    (:func:`ambiqa.api.jobs.export_target`).

    ``path`` may also be a bare program name (no such file): its uncompiled, zero-shot
    prompts are exported, marked as such.
    """
    from ambiqa.api.jobs import export_target

    found = export_target(path)
    return (found.program, found.manifest) if with_manifest else found.program


def register(sub: argparse._SubParsersAction) -> None:
    """Add the optimization sub-commands to the top-level parser."""
    p = sub.add_parser("compile", help="compile a program with a teleprompter")
    p.add_argument("program", help=PROGRAM_HELP)
    p.add_argument("--train", default=None,
                   help="training split, e.g. asqa:train:50 (default: the program's recipe)")
    p.add_argument("--dev", default=None, help="held-out split to score the result")
    p.add_argument("--metric", default=None, help="default: the program's recipe (d-f1 / f1)")
    p.add_argument("--optimizer", default="bootstrap", choices=list(teleprompter_names()),
                   help="the teleprompter (default bootstrap; each is described below)")
    p.add_argument("--k", type=at_least(0), default=2, help="demos per predictor")
    p.add_argument("--seed", type=int, default=0,
                   help="seed for shuffling and sampling demos and the held-out split "
                        "(default 0)")
    p.add_argument("--threshold", type=float, default=None, help="bootstrap metric threshold")
    p.add_argument("--num-candidates", type=int, default=4,
                   help="bootstrap-rs candidate sets / mipro instruction candidates")
    p.add_argument("--mipro-trials", type=int, default=4,
                   help="mipro: Bayesian-search trials over instruction and demo candidates "
                        "(default 4)")
    p.add_argument("--knn-pool", type=int, default=8, help="knn: demos kept per predictor")
    p.add_argument("--threads", type=int, default=1,
                   help="training questions answered at once while bootstrapping, "
                        "validation questions while choosing, and dev questions in flight "
                        "(2 uses the embedded LM's 2 slots; DSPy's "
                        "bootstrap loop and where it stops are unchanged)")
    p.add_argument("--knn-gold-only", action="store_true",
                   help="knn: pool only the training split's labelled demos (no bootstrap, no "
                        "LM call) -- ToC's nearest-neighbour exemplars")
    p.add_argument("--n-val", type=int, default=8,
                   help="bootstrap-rs/mipro/gepa: held-out training questions scoring "
                        "candidates")
    p.add_argument("--predictor-signal", action="store_true",
                   help="then give each inner predictor with a signal of its own (verifiers, "
                        "typing, rewriting, VerDICt's read) demos chosen against it, balanced "
                        "across its classes (one more pass over the training questions)")
    p.add_argument("--demos", default=None, metavar="PLAN",
                   help="per-predictor demos after the teleprompter: PREDICTOR=SOURCE[:k],... "
                        "with SOURCE none|keep|gold|signal|bootstrap, e.g. "
                        "verify=signal:2,write=gold:1,clarify=none (predictors by path, last "
                        "part, signature or role: writer, verifier, typing, rewrite)")
    p.add_argument("--candidates", default=None, metavar="PLANS",
                   help="demo plans tried on top of the result on the validation split, "
                        "separated by ';' (default for long-answer programs: "
                        "'writer=none;writer=gold:1'; '' for none)")
    p.add_argument("--select-val", type=at_least(1), default=None, metavar="N",
                   help="training questions held out to choose between zero-shot, the input "
                        "and the compiled candidates (default a third, at most 20)")
    p.add_argument("--no-select", action="store_true",
                   help="ship the teleprompter's result unchecked (no validation split, no "
                        "comparison with zero-shot)")
    p.add_argument("--force", action="store_true",
                   help="ship the teleprompter's result even when zero-shot scores higher on "
                        "the validation split (the comparison is still recorded)")
    p.add_argument("--ship", default=None, metavar="CANDIDATE",
                   help="ship this candidate whatever the scores: a label from the compile's "
                        "table, e.g. 'labeled+writer=gold:1' (the comparison is still "
                        "recorded; a rerun answers the LM calls from the response cache)")
    p.add_argument("--reflection-lm", default=None,
                   help="gepa: the LM that reflects (simba: writes rules), any --lm spec; "
                        "default the task LM")
    p.add_argument("--gepa-rollouts", type=int, default=None,
                   help="gepa: program runs it may score (default 3 x train+held-out)")
    p.add_argument("--gepa-auto", default=None, choices=["light", "medium", "heavy"],
                   help="gepa: DSPy's preset budget instead of --gepa-rollouts")
    p.add_argument("--gepa-selector", default="round_robin", choices=["round_robin", "all"],
                   help="gepa: rewrite one predictor per iteration, or all of them")
    p.add_argument("--reflection-minibatch", type=int, default=2,
                   help="gepa: runs shown to the reflection LM per proposal")
    p.add_argument("--simba-steps", type=int, default=2, help="simba: optimization steps")
    p.add_argument("--simba-bsize", type=int, default=4,
                   help="simba: mini-batch size (at most the training set)")
    _add_budget_args(p)
    p.add_argument("--reader", default=None,
                   help=READER_HELP)
    p.add_argument("--program-config", default=None, help=PROGRAM_CONFIG_HELP)
    p.add_argument("--out", default=None,
                   help="artifact to write (default artifacts/PROGRAM.json)")
    add_index_args(p)
    add_lm_args(p)
    p.set_defaults(fn=cmd_compile)

    p = sub.add_parser("tune", help="Optuna search over demos, teleprompter and program knobs")
    p.add_argument("program", help=PROGRAM_HELP)
    p.add_argument("--study", required=True, help="study name (resumes if it exists)")
    p.add_argument("--storage", required=True,
                   help="Optuna RDB URL: sqlite:///tune.db, postgresql://user:pw@host/db ...")
    p.add_argument("--trials", type=int, default=20, help="finished trials wanted in total")
    p.add_argument("--train", default=None, help="training split (default: the recipe's)")
    p.add_argument("--metric", default=None,
                   help="objective metric (default: the program's recipe, d-f1 / f1)")
    p.add_argument("--teleprompters", default=",".join(TUNE_TELEPROMPTERS),
                   help="comma-separated choices for trials")
    p.add_argument("--max-demos", type=int, default=3,
                   help="most demos a trial may give one predictor (default 3)")
    p.add_argument("--n-sets", type=int, default=4, help="candidate demo sets per predictor")
    p.add_argument("--pool-size", type=int, default=8,
                   help="demos gathered per predictor (bootstrapped, labelled or by signal) "
                        "that the candidate sets are drawn from (default 8)")
    p.add_argument("--n-val", type=int, default=8,
                   help="held-out training questions scored per trial (0: all)")
    p.add_argument("--cost-penalty", type=float, default=0.0,
                   help="objective = metric - penalty x cost per question")
    p.add_argument("--cost-unit", default="lm_calls", choices=["lm_calls", "tokens"],
                   help="cost per question: LM calls, or thousands of tokens")
    p.add_argument("--no-knobs", action="store_true", help="tune demos only, not settings")
    p.add_argument("--seed", type=int, default=0,
                   help="seed for the demo pools, the held-out split and Optuna's sampler "
                        "(default 0)")
    _add_budget_args(p)
    p.add_argument("--reader", default=None,
                   help=READER_HELP)
    p.add_argument("--program-config", default=None,
                   help=PROGRAM_CONFIG_HELP + "; settings the search does not tune")
    p.add_argument("--out", default=None,
                   help="artifact for the best trial (default artifacts/PROGRAM-tuned.json)")
    add_index_args(p)
    add_lm_args(p)
    p.set_defaults(fn=cmd_tune)

    p = sub.add_parser("tune-eor", help="tune EoR voter weights over cached answers (no LM)")
    p.add_argument("cache", help="results.jsonl of an EoR evaluation, or a cache JSON")
    p.add_argument("--data", default=None,
                   help="data spec with the gold answers (when the cache has none)")
    p.add_argument("--dev-cache", default=None,
                   help="held-out answers (results.jsonl or cache JSON), scored with the "
                        "default and the tuned weights, never tuned on")
    p.add_argument("--dev-data", default=None,
                   help="data spec with the gold answers of --dev-cache (when it has none)")
    p.add_argument("--gold", default="f1", choices=["em", "f1", "contains"],
                   help="objective: how the voted answer is scored against the gold answers "
                        "(token F1 by default)")
    p.add_argument("--trials", type=int, default=2000,
                   help="finished trials wanted in the study in total (a rerun tops up)")
    p.add_argument("--seed", type=int, default=0, help="Optuna sampler seed (default 0)")
    p.add_argument("--tune-threshold", action="store_true",
                   help="tune t too (default: the paper's t = 0.1)")
    p.add_argument("--study", default=None,
                   help="Optuna study name, resumed if it exists in --storage")
    p.add_argument("--storage", default=None,
                   help="Optuna RDB URL, e.g. sqlite:///eor.db (default: in memory, not kept)")
    p.add_argument("--out", default=None, help="JSON report")
    p.add_argument("--plot", default=None, help="heatmap PNG of the weights")
    p.add_argument("--artifact", default=None, help="EoR artifact with the tuned weights")
    _add_research_flag(p)
    p.set_defaults(fn=cmd_tune_eor)

    p = sub.add_parser("export", help="render a compiled program's prompts")
    p.add_argument("artifact", help="artifact path, or a program name (uncompiled prompts)")
    p.add_argument("--format", default="md", choices=["md", "json", "jinja"],
                   help="md: readable prompts with their demos (default); json: the messages "
                        "per predictor; jinja: templates to fill in outside DSPy")
    p.add_argument("--out", default=None, help="write to this file instead of stdout")
    p.add_argument("--verify", action="store_true",
                   help="send the exported prompts for --data questions straight to the LM "
                        "and compare with the program's outputs (exit 1 on a difference)")
    p.add_argument("--data", default=None, help="questions for --verify, e.g. asqa:dev:2")
    p.add_argument("--n", type=at_least(1), default=2, help="questions for --verify")
    add_index_args(p)
    add_lm_args(p)
    p.set_defaults(fn=cmd_export)


def _add_research_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-eval-splits", action="store_true",
                   help="research only: allow dev/test data (or ids shared with dev) as training "
                        "data; the artifact records it and loading it warns")


def _add_budget_args(p: argparse.ArgumentParser) -> None:
    _add_research_flag(p)
    p.add_argument("--max-lm-calls", type=at_least(1), default=None,
                   help="stop cleanly once this many LM calls are spent, keeping the best")
    p.add_argument("--dry-run", action="store_true",
                   help="estimate LM calls and tokens from a sample run, then stop")
    p.add_argument("--sample", type=at_least(1), default=1,
                   help="questions in the --dry-run sample")
