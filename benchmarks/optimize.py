"""Does compiling help? Uncompiled vs each teleprompter on a dev slice; EoR voter weights.

Part 1 -- teleprompters. For vanilla_rag and diva on ASQA and resp on HotpotQA (the recipe's
metric: D-F1 with the named reader, token F1 for HotpotQA), compile with each teleprompter on
the first ``--n-train`` usable questions of the recipe's *training* split and score the result
on the first ``--n-dev`` questions of the dev split (never used in training). Each row
records the dev metric, compile wall time and LM calls, the dev run's LM calls per question,
and the demos each predictor got.

Part 2 -- EoR voter. Collect EoR's per-member answers and similarities (every member active)
on ``webq:train`` (NQ has no training split here) and on the dev sets ``webq:dev`` and
``nq:oracle``, cache them as JSON, tune the voter weights on the train cache with Optuna (no
LM call per trial), and report accuracy (``--eor-gold``: em | f1 | contains) of the default
vs the tuned weights on each dev cache, with trials per second, a weights table and a
heatmap.

Sizes: the defaults (train 6, dev 8; EoR 24 train / 16 dev) keep a real-LM run to a few hours
on 2 CPU cores: the embedded 1.5B model needs ~10-20 s per LM call, a vanilla-RAG question
costs 2 calls plus ~3 D-F1 reader calls, Diva ~10, and each teleprompter both bootstraps on
the train slice and re-scores the dev slice. With 8 dev questions a difference of one
question is 0.125 in a rate: read the table as a smoke signal, not a ranking.

Resumable: every finished (program, teleprompter) pair and EoR cache is kept
(``results/optimize/optimize-<lm>.jsonl`` and ``eor-<set>-<lm>.json``); a rerun skips them.

    python -m benchmarks.optimize --lm fake                    # plumbing check, seconds
    python -m benchmarks.optimize --lm embedded                # the real run (hours)
    python -m benchmarks.optimize --lm embedded --programs vanilla_rag --teleprompters none,labeled
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

import ambiqa  # noqa: E402,F401,I001  (environment defaults before DSPy loads)
from ambiqa.errors import AmbiqaError  # noqa: E402
from ambiqa.fsutil import atomic_write_json, atomic_write_text  # noqa: E402
from benchmarks.methods_cost import (  # noqa: E402
    append_row,
    lm_slug,
    open_benchmark_retriever,
    open_lm,
    read_rows,
)

PROGRAMS = ("vanilla_rag", "diva", "resp")
DEV_OF = {"vanilla_rag": "asqa:dev", "diva": "asqa:dev", "resp": "hotpotqa:dev"}
TELEPROMPTERS = ("none", "labeled", "bootstrap", "bootstrap-rs", "knn")
EOR_DEV = ("webq:dev", "nq:oracle")


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"n_train": args.n_train, "n_dev": args.n_dev, "k": args.k,
            "num_candidates": args.num_candidates}


def run_teleprompter(program_name: str, tp: str, args: argparse.Namespace, retriever: Any,
                     lm: Any, reader: Any) -> dict[str, Any]:
    import dspy

    from ambiqa.data import load_dataset
    from ambiqa.evaluation.registry import dspy_metric
    from ambiqa.optimizers.budget import Budget
    from ambiqa.optimizers.compile import compile_program, score_program
    from ambiqa.optimizers.recipes import get_recipe, usable_examples
    from ambiqa.programs.registry import build_program

    recipe = get_recipe(program_name)
    # --metric overrides the ASQA metric only; HotpotQA keeps token F1
    metric_name = (args.metric or recipe.metric) if recipe.metric != "f1" else recipe.metric
    train = usable_examples(load_dataset(recipe.train), recipe, metric_name,
                            recipe.train)[: args.n_train]
    dev = load_dataset(f"{DEV_OF[program_name]}:{args.n_dev}")
    from ambiqa.evaluation.registry import NEEDS_READER

    metric = dspy_metric(metric_name, reader=reader if metric_name in NEEDS_READER else None)
    program = build_program(program_name, retriever=retriever)
    with dspy.context(lm=lm):
        t0 = time.perf_counter()
        compiled, report = compile_program(program, train, optimizer=tp, metric=metric,
                                           k=args.k, num_candidates=args.num_candidates,
                                           budget=Budget(args.max_lm_calls))
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = score_program(compiled, dev, metric)
        dev_s = time.perf_counter() - t0
    n = max(1, result["n"])
    return {
        "kind": "teleprompter", "program": program_name, "teleprompter": tp,
        "train": f"{recipe.train}[:{len(train)}]", "dev": f"{DEV_OF[program_name]}:{args.n_dev}",
        "metric": metric_name, "reader": getattr(metric, "reader_name", None),
        "dev_score": round(result["score"], 4), "dev_scores": result["scores"],
        "dev_errors": result["errors"], "nan_scores": result["nan_scores"],
        "compile_s": round(compile_s, 1), "compile_lm_calls": report.cost["lm_calls"],
        "compile_tokens": report.cost["input_tokens"] + report.cost["output_tokens"],
        "dev_s_per_q": round(dev_s / n, 1),
        "dev_lm_calls_per_q": round(result["cost"]["lm_calls"] / n, 2),
        "val_score": report.val_score, "demos": report.demos_per_predictor,
        "stopped_by_budget": report.stopped_by_budget, "settings": _settings(args),
    }


def eor_caches(args: argparse.Namespace, retriever: Any, lm: Any, out_dir: Path, slug: str,
               ) -> dict[str, Any]:
    """Per data set, the EoR answer cache (built once, then read back)."""
    import dspy

    from ambiqa.data import load_dataset
    from ambiqa.optimizers import eor_weights as ew
    from ambiqa.programs.eor import EoR

    sources = {"BM25": args._bm25} if args._bm25 is not None else {}
    program = EoR(retriever=retriever, sources=sources)
    caches = {}
    for spec, n in (("webq:train", args.eor_n_train), *((d, args.eor_n_dev) for d in EOR_DEV)):
        path = out_dir / f"eor-{spec.replace(':', '-')}-{n}-{slug}.json"
        if path.is_file():
            caches[spec] = ew.load_cache(path, gold_metric=args.eor_gold)
            continue
        examples = load_dataset(f"{spec}:{n}")
        t0 = time.perf_counter()
        with dspy.context(lm=lm):
            cache = ew.collect_cache(program, examples, gold_metric=args.eor_gold)
        cache.source = f"{spec}:{n}"
        doc = cache.to_json()
        doc["collect_s"] = round(time.perf_counter() - t0, 1)
        atomic_write_json(path, doc)
        caches[spec] = cache
    return caches


def run_eor(args: argparse.Namespace, retriever: Any, lm: Any, out_dir: Path, slug: str,
            ) -> dict[str, Any]:
    from ambiqa.optimizers import eor_weights as ew

    caches = eor_caches(args, retriever, lm, out_dir, slug)
    train = caches["webq:train"]
    result = ew.tune_weights(train, trials=args.eor_trials, seed=0)
    rows = {"default": ew.DEFAULT_WEIGHTS, "tuned (webq:train)": result.weights}
    ew.plot_weights(rows, train.members, out_dir / f"eor-weights-{slug}.png")
    atomic_write_text(out_dir / f"eor-weights-{slug}.md",
                      ew.weights_table(rows, train.members) + "\n")
    row: dict[str, Any] = {
        "kind": "eor", "members": train.members, "gold": args.eor_gold,
        "trials": result.trials, "trials_per_s": result.trials_per_s,
        "tune_s": round(result.seconds, 2), "weights": result.weights,
        "train": {"set": train.source, "n": len(train.questions),
                  "default": ew.accuracy(train, ew.DEFAULT_WEIGHTS), "tuned": result.value,
                  "oracle": train.oracle(), "members": train.member_accuracy()},
    }
    for spec in EOR_DEV:
        dev = caches[spec]
        row[spec] = {"n": len(dev.questions), "default": ew.accuracy(dev, ew.DEFAULT_WEIGHTS),
                     "tuned": ew.accuracy(dev, result.weights), "oracle": dev.oracle(),
                     "members": dev.member_accuracy()}
    return row


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    out = [header, "", "| program | teleprompter | metric (reader) | dev score | compile s | "
           "compile LM calls | dev LM calls/q | demos per predictor |", "|" + "---|" * 8]
    for r in rows:
        if r.get("kind") == "error":
            reason = str(r.get("error", "")).splitlines()[0][:90]
            out.append(f"| {r['program']} | {r['teleprompter']} | - | n/a: {reason} | | | | |")
            continue
        if r.get("kind") != "teleprompter":
            continue
        demos = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in (r.get("demos") or {}).items())
        reader = f" ({r['reader']})" if r.get("reader") else ""
        out.append(f"| {r['program']} | {r['teleprompter']} | {r['metric']}{reader} | "
                   f"{r['dev_score']:.3f} | {r['compile_s']:.0f} | {r['compile_lm_calls']} | "
                   f"{r['dev_lm_calls_per_q']} | {demos} |")
    for r in rows:
        if r.get("kind") != "eor":
            continue
        out += ["", f"EoR voter ({r['gold']} of the voted answer; members "
                    f"{', '.join(r['members'])}; {r['trials']} trials at "
                    f"{r['trials_per_s']} trials/s, 0 LM calls per trial)", "",
                "| set | n | default weights | tuned weights | oracle |", "|---|---|---|---|---|"]
        for key in ("train", *EOR_DEV):
            d = r[key]
            name = d.get("set", key) if key == "train" else key
            out.append(f"| {name} | {d['n']} | {d['default']:.3f} | {d['tuned']:.3f} | "
                       f"{d['oracle']:.3f} |")
    return "\n".join(out) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lm", default="fake", help="fake | embedded[:name] | provider/model")
    p.add_argument("--delay", type=float, default=0.0, help="fake LM delay per call")
    p.add_argument("--retriever", default="auto", choices=["auto", "colbert", "bm25"])
    p.add_argument("--programs", default=",".join(PROGRAMS))
    p.add_argument("--teleprompters", default=",".join(TELEPROMPTERS))
    p.add_argument("--metric", default=None, help="override the ASQA metric (default d-f1)")
    p.add_argument("--n-train", type=int, default=6)
    p.add_argument("--n-dev", type=int, default=8)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--num-candidates", type=int, default=2)
    p.add_argument("--max-lm-calls", type=int, default=None, help="per compile")
    p.add_argument("--no-eor", action="store_true")
    p.add_argument("--eor-n-train", type=int, default=24)
    p.add_argument("--eor-n-dev", type=int, default=16)
    p.add_argument("--eor-trials", type=int, default=2000)
    p.add_argument("--eor-gold", default="contains", choices=["em", "f1", "contains"])
    p.add_argument("--out-dir", default=str(HERE / "results" / "optimize"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from ambiqa.evaluation.reader import make_reader
    from ambiqa.lm import configure
    from ambiqa.retrieval.factory import index_root

    args = parse_args(argv)
    out_dir = Path(args.out_dir)
    slug = lm_slug(args.lm)
    rows_path = out_dir / f"optimize-{slug}.jsonl"
    rows = read_rows(rows_path)
    done = {(r["program"], r["teleprompter"]) for r in rows if r.get("kind") == "teleprompter"
            and r.get("settings") == _settings(args)}
    corpus = ROOT.parent / "shared" / "data" / "corpus" / "wiki_passages.jsonl"
    retriever, desc = open_benchmark_retriever(args.retriever, index_root(), corpus)
    args._bm25 = None
    if "bm25" not in desc:
        args._bm25, _ = open_benchmark_retriever("bm25", index_root(), corpus)
    with open_lm(args.lm, args.delay, 0.5) as lm:
        configure(lm)
        reader = make_reader(None)
        for program in [p.strip() for p in args.programs.split(",") if p.strip()]:
            for tp in [t.strip() for t in args.teleprompters.split(",") if t.strip()]:
                if (program, tp) in done:
                    continue
                print(f"{program} / {tp} ...", file=sys.stderr, flush=True)
                try:
                    row = run_teleprompter(program, tp, args, retriever, lm, reader)
                except Exception as exc:  # one failing pair is recorded, not fatal
                    if not isinstance(exc, AmbiqaError):
                        traceback.print_exc()
                    row = {"kind": "error", "program": program, "teleprompter": tp,
                           "error": f"{type(exc).__name__}: {exc}"[:500]}
                row.update(lm=args.lm, retriever=desc)
                append_row(rows_path, row)
                rows.append(row)
        if not args.no_eor:
            row = run_eor(args, retriever, lm, out_dir, slug)
            row.update(lm=args.lm, retriever=desc)
            rows = [r for r in rows if r.get("kind") != "eor"] + [row]
            append_row(rows_path, row)
    header = (f"## Optimizers ({args.lm}, retriever {desc}; train {args.n_train}, "
              f"dev {args.n_dev} per program)")
    table = markdown([r for r in rows if r.get("settings") in (None, _settings(args))], header)
    atomic_write_text(out_dir / f"optimize-{slug}.md", table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
