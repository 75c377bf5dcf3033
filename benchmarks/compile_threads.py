"""Does ``ambiqa compile --threads 2`` shorten bootstrapping? A paired measurement.

The same N ASQA-train questions (the first N usable ones, in the compile's seed-0 order) are
bootstrapped once per ``--threads`` value, one run after the other on the same warm model, with
the LM response cache off so every call is computed, and with as many traces wanted as there
are questions (``k`` = N), so every run walks all N questions and none stops early; the
teacher shows the compile's default 2 gold demos per call, as ``--k 2`` does (a teacher showing
N long ASQA demos overflows the 1.5B's 4k context: the first version of this script did that,
and its runs measured failing calls). A run with any LM error is refused, not reported. Each run
is its own process: a run in the same process would find the previous run's prompts in the
engine's prompt cache (measured: 2 computed prompt tokens instead of 1,508). Per run:
wall seconds, LM calls, computed prompt and output tokens, traces kept, and whether the kept
traces equal the first run's (batched decoding is not bit-identical to serial decoding, see
BENCHMARKS.md "Slot count", so they may differ).

    python -m benchmarks.compile_threads --program diva --n 4

Writes ``benchmarks/results/compile_threads/{program}-n{N}.json`` and ``.md`` (atomically;
a short run, so no resume: rerunning measures again).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

import ambiqa  # noqa: E402,F401  (sets LITELLM_LOCAL_MODEL_COST_MAP before DSPy loads)
from ambiqa.fsutil import atomic_write_json, atomic_write_text  # noqa: E402

OUT = HERE / "results" / "compile_threads"
TEACHER_K = 2  # gold demos the teacher shows per call: the evidence compiles' --k 2


def demos_digest(program: Any) -> str:
    """A short hash of every predictor's demos (equal digests: the same traces kept)."""
    demos = {name: [dict(d) for d in p.demos] for name, p in program.named_predictors()}
    text = json.dumps(demos, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def measure(program: Any, trainset: list[Any], metric: Any, threads: int) -> dict[str, Any]:
    """Bootstrap ``program`` on all of ``trainset`` with ``threads`` questions in flight."""
    from ambiqa.optimizers.compile import bootstrap
    from ambiqa.tracing import track

    start = time.perf_counter()
    with track() as trace:
        compiled = bootstrap(program, trainset, metric, k=len(trainset), seed=0,
                             teacher_k=TEACHER_K, threads=threads)
    cost = trace.summary()
    traces = sum(1 for _, p in compiled.named_predictors() for d in p.demos
                 if d.get("augmented"))  # not the gold demos a predictor without one keeps
    return {"threads": threads, "questions": len(trainset),
            "wall_s": round(time.perf_counter() - start, 1),
            "lm_calls": cost["lm_calls"], "lm_errors": cost["lm_errors"],
            "computed_tokens": cost["computed_tokens"],
            "output_tokens": cost["output_tokens"],
            "traces_kept": traces, "demos": demos_digest(compiled)}


def failed_runs(runs: list[dict[str, Any]]) -> list[str]:
    """Why each run with LM errors is no measurement (its questions stopped at the error)."""
    return [f"--threads {r['threads']}: {r['lm_errors']} LM call(s) failed"
            for r in runs if r.get("lm_errors")]


def render(result: dict[str, Any]) -> str:
    """The markdown table of one measurement, with the ratio to the first row."""
    rows = result["runs"]
    base = rows[0]["wall_s"] or float("nan")
    lines = [f"`{result['command']}` ({result['program']}, {result['lm']}, "
             f"{result['index']}, {result['created']})", "",
             "| threads | questions | wall s | s/question | speed-up | LM calls | "
             "computed prompt tok | output tok | traces kept | same traces as first row |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        same = "yes" if r["demos"] == rows[0]["demos"] else "no"
        lines.append(f"| {r['threads']} | {r['questions']} | {r['wall_s']:.0f} | "
                     f"{r['wall_s'] / r['questions']:.0f} | {base / r['wall_s']:.2f}× | "
                     f"{r['lm_calls']} | {r['computed_tokens']} | {r['output_tokens']} | "
                     f"{r['traces_kept']} | {same} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", default="vanilla_rag")
    ap.add_argument("--n", type=int, default=6, help="ASQA-train questions bootstrapped")
    ap.add_argument("--threads", default="1,2", help="values compared, in this order")
    ap.add_argument("--lm", default="embedded")
    ap.add_argument("--index", default="dense:wiki-dense")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--single", type=int, default=None,
                    help="(internal) measure this one thread count and print its row")
    args = ap.parse_args(argv)
    try:
        counts = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        ap.error(f"--threads must be integers separated by commas, got {args.threads!r}")
    if args.n < 1 or not counts or min(counts) < 1:
        ap.error("--n and every --threads value must be at least 1")

    if args.single is not None:
        from ambiqa.data import load_dataset
        from ambiqa.evaluation.reader import make_reader
        from ambiqa.evaluation.registry import dspy_metric
        from ambiqa.lm import configure, make_lm
        from ambiqa.optimizers.recipes import get_recipe, usable_examples
        from ambiqa.programs.registry import build_program, program_class
        from ambiqa.retrieval.factory import open_retriever

        recipe = get_recipe(args.program)
        trainset = usable_examples(load_dataset(recipe.train), recipe, recipe.metric,
                                   recipe.train)[: args.n]
        configure(make_lm(args.lm, cache=False))  # uncached: every call must really cost
        needs = program_class(args.program).needs_retriever
        program = build_program(args.program,
                                retriever=open_retriever(args.index) if needs else None)
        metric = dspy_metric(recipe.metric, reader=make_reader())
        print(json.dumps(measure(program, trainset, metric, args.single)), flush=True)
        return 0

    runs = []
    for threads in counts:  # a fresh process each: no prompt cache carried between runs
        cmd = [sys.executable, "-m", "benchmarks.compile_threads", "--program", args.program,
               "--n", str(args.n), "--lm", args.lm, "--index", args.index,
               "--single", str(threads)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            print(done.stderr[-3000:], file=sys.stderr)
            print(f"the run with --threads {threads} failed (exit {done.returncode})",
                  file=sys.stderr)
            return 1
        print(lines[-1], flush=True)
        run = json.loads(lines[-1])
        if problems := failed_runs([run]):  # stop here: later runs would cost for nothing
            print(done.stderr[-2000:], file=sys.stderr)
            print("not written: " + "; ".join(problems) + " (a context overflow or a dead "
                  "engine measures failures, not a compile; the errors are above)",
                  file=sys.stderr)
            return 1
        runs.append(run)
    result = {"program": args.program, "n": args.n, "lm": args.lm, "index": args.index,
              "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "command": "python -m benchmarks.compile_threads " + shlex.join(
                  argv if argv is not None else sys.argv[1:]),
              "runs": runs}
    stem = args.out / f"{args.program}-n{args.n}"
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(stem.with_suffix(".json"), result)
    atomic_write_text(stem.with_suffix(".md"), render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
