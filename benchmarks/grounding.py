"""VerDICt's grounding metrics for stored ASQA runs, scored after the run, no program re-run.

VerDICt (Lee et al., App. A) reports G-Precision, G-Recall and G-F1: whether each generated
interpretation is supported by the passage it cites, and how many of the grounded readings
(generated and gold) the passages a program read can support. Every ASQA evidence row keeps
its interpretations and the passages (with text) it read, so these metrics are computed here
from the stored rows with an LM judge (:class:`ambiqa.evaluation.judge.LMGroundingJudge`,
the same V(q, p) question as Diva's verifier). The judge is the configured LM -- by default
the embedded 1.5B, **a stand-in** for the paper's judge, named in every output.

A failed question in the source run scores 0, as in every table. Scores go to
``benchmarks/results/evidence/grounding/<dataset>-<run>.jsonl`` one question at a time, so a
killed run resumes where it stopped; the summary (means with intervals, and paired
differences against the first run) goes to ``benchmarks/results/evidence/grounding.{json,md}``.

    python -m benchmarks.grounding                       # verdict and vanilla_rag, first 40
    python -m benchmarks.grounding --runs asqa/verdict,asqa/diva --n 40
    python -m benchmarks.grounding --report-only         # the summary from stored scores
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from ambiqa.errors import AmbiqaError, ConfigError  # noqa: E402
from ambiqa.evaluation.runs.run_dir import ResultsFile  # noqa: E402
from ambiqa.evaluation.stats import (  # noqa: E402
    fmt_interval,
    paired_comparison,
    summarize_metric,
)
from ambiqa.fsutil import atomic_write_json, atomic_write_text  # noqa: E402

EVIDENCE = ROOT / "benchmarks/results/evidence"
METRICS = ("g-precision", "g-recall", "g-f1")
DEFAULT_RUNS = ("asqa/verdict", "asqa/vanilla_rag")


def _source_rows(run_dir: Path, ids: list[str]) -> dict[str, dict[str, Any]]:
    rows = {str(r["id"]): r for r in ResultsFile(run_dir / "results.jsonl").read()}
    return {i: rows[i] for i in ids if i in rows}


def score_row(example: Any, row: dict[str, Any]) -> dict[str, Any]:
    """One question's grounding scores from its stored prediction (0 for a failed row)."""
    from ambiqa.evaluation.registry import METRICS as REGISTRY
    from ambiqa.tracing import track

    if row.get("error") or not row.get("prediction"):
        return {"id": str(row["id"]), "error": row.get("error") or "no prediction",
                "metrics": {m: 0.0 for m in METRICS}, "judge_calls": 0}
    t0 = time.perf_counter()
    with track() as trace:
        scores = {m: float(REGISTRY[m](example, row["prediction"])) for m in METRICS}
    return {"id": str(row["id"]), "error": None, "metrics": scores,
            "judge_calls": trace.lm_calls, "seconds": round(time.perf_counter() - t0, 2)}


def score_run(run_key: str, examples: dict[str, Any], out_dir: Path, *,
              root: Path = EVIDENCE, threads: int = 2, log: Any = print
              ) -> list[dict[str, Any]]:
    """Score the run ``root/dataset/run`` on the given examples' ids, resuming the scores
    already stored under ``out_dir``."""
    from ambiqa.parallel import run_parallel

    src = _source_rows(root / run_key, list(examples))
    out = ResultsFile(out_dir / f"{run_key.replace('/', '-')}.jsonl")
    out.path.parent.mkdir(parents=True, exist_ok=True)
    out.repair()
    done = {str(r["id"]) for r in out.read()}
    todo = [i for i in examples if i in src and i not in done]
    missing = [i for i in examples if i not in src]
    if missing:
        log(f"{run_key}: {len(missing)} of the {len(examples)} questions have no row yet "
            "(left out until the run holds them)")
    for start in range(0, len(todo), max(1, threads)):
        chunk = todo[start:start + max(1, threads)]
        for row in run_parallel(lambda i: score_row(examples[i], src[i]), chunk, threads):
            out.append(row)
        log(f"{run_key}: {len(done) + start + len(chunk)}/{len(src)} scored")
    return [r for r in out.read() if r["id"] in examples]


def summarize(scored: dict[str, list[dict[str, Any]]], judge: str | None,
              n: int) -> dict[str, Any]:
    """Means with intervals per run, and each run against the first, paired."""
    keys = list(scored)
    result: dict[str, Any] = {"judge": judge, "n_requested": n, "runs": {}, "paired": []}
    for key, rows in scored.items():
        result["runs"][key] = {m: summarize_metric(rows, m) for m in METRICS}
        result["runs"][key]["judge_calls_per_q"] = (
            sum(r.get("judge_calls", 0) for r in rows) / len(rows) if rows else math.nan)
    if keys:
        for key in keys[1:]:
            for m in METRICS:
                result["paired"].append({"run": keys[0], "baseline": key,
                                         **paired_comparison(scored[key], scored[keys[0]], m)})
    return result


def render(result: dict[str, Any], command: str, scores_dir: str = "grounding/") -> str:
    lines = ["## Grounding metrics (VerDICt App. A) on stored ASQA runs", "",
             f"Command: `{command}` (per-question scores in `{scores_dir}`; "
             "`--report-only` re-renders).", "",
             f"Judge: `{result['judge']}` — the V(q, p) question asked by the LM, **a stand-in** "
             "for the paper's judge; figures are not comparable to the paper's. First "
             f"{result['n_requested']} ASQA dev questions of each run; a failed question "
             "scores 0; 95% BCa bootstrap intervals over questions.", "",
             "Judge calls per question count only new verdicts: the judge remembers a "
             "(question, passages) verdict, so a run scored after another that cites the "
             "same passage for the same reading asks fewer.", "",
             "| run | n | G-Precision | G-Recall | G-F1 | judge calls/q |",
             "|---|---:|---|---|---|---:|"]
    for key, s in result["runs"].items():
        cells = [f"{s[m]['mean']:.3f} {fmt_interval(*s[m]['ci95'])}" for m in METRICS]
        lines.append(f"| {key} | {s['g-f1']['n']} | " + " | ".join(cells)
                     + f" | {s['judge_calls_per_q']:.1f} |")
    if result["paired"]:
        lines += ["", "Paired on shared questions (Δ = run − baseline; * = interval excludes 0):",
                  "", "| run | baseline | metric | n | Δ | 95% CI |",
                  "|---|---|---|---:|---:|---|"]
        for p in result["paired"]:
            star = " *" if p["excludes_zero"] else ""
            lines.append(f"| {p['run']} | {p['baseline']} | {p['metric']} | {p['n_shared']} | "
                         f"{p['diff']:+.3f}{star} | {fmt_interval(*p['ci95'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default=",".join(DEFAULT_RUNS),
                    help="comma-separated DATASET/RUN directories under the evidence root; "
                         "the first is compared with each other one")
    ap.add_argument("--n", type=int, default=40, help="first N ASQA dev questions")
    ap.add_argument("--lm", default="embedded", help="the judge LM (as `ambiqa evaluate --lm`)")
    ap.add_argument("--threads", type=int, default=2, help="questions judged at once")
    ap.add_argument("--root", type=Path, default=EVIDENCE, help="the evidence root")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)
    runs = [r.strip().strip("/") for r in args.runs.split(",") if r.strip()]
    command = "python -m benchmarks.grounding" + (
        f" --runs {','.join(runs)}" if tuple(runs) != DEFAULT_RUNS else "") + (
        f" --n {args.n}" if args.n != 40 else "") + (
        f" --root {args.root}" if args.root.resolve() != EVIDENCE.resolve() else "")
    root: Path = args.root
    out_dir = root / "grounding"
    try:
        for key in runs:
            if not key.startswith("asqa") or not (root / key / "results.jsonl").is_file():
                raise ConfigError(f"no stored ASQA run at {root / key}",
                                  hint="name runs as asqa/RUN or asqa-compiled/RUN")
        from ambiqa.data.specs import load_dataset

        examples = {str(e.id): e for e in load_dataset(f"asqa:dev:{args.n}")}
        meta_path = out_dir / "judge.json"
        if args.report_only:
            judge = json.loads(meta_path.read_text())["judge"] if meta_path.is_file() else None
            scored = {k: [r for r in ResultsFile(
                out_dir / f"{k.replace('/', '-')}.jsonl").read() if r["id"] in examples]
                for k in runs}
        else:
            from ambiqa.evaluation.registry import judge_name
            from ambiqa.lm.factory import configure, make_lm

            configure(make_lm(args.lm))
            judge = judge_name(list(METRICS))
            if meta_path.is_file() and json.loads(meta_path.read_text())["judge"] != judge:
                raise ConfigError(f"{out_dir} holds scores from another judge",
                                  hint="use another --out, or the judge recorded there")
            out_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_json(meta_path, {"judge": judge})
            scored = {k: score_run(k, examples, out_dir, root=root, threads=args.threads)
                      for k in runs}
        result = summarize(scored, judge, args.n)
        result["command"] = command
        atomic_write_json(root / "grounding.json", result)
        atomic_write_text(root / "grounding.md", render(
            result, command, str(out_dir.relative_to(ROOT) if out_dir.is_relative_to(ROOT)
                                 else out_dir) + "/"))
    except AmbiqaError as exc:
        print(f"grounding: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {root / 'grounding.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
