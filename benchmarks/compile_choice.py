"""The candidate table of a compile that chose: what each candidate scored on the validation
split, what it cost, how long its answers were, and what shipped (issue 46).

A compile run with the choice (``ambiqa compile ... --out A.json``) stores, in the artifact's
manifest, each candidate's mean objective, LM calls, memo hits, seconds and paired interval
against zero-shot (``optimizer.selection``), and beside the artifact, in
``A.selection.jsonl``, each candidate's answer to each validation question. This script
reads both -- no LM call -- and adds what the objective folds together: STR-EM and ROUGE-L
separately (the objective ``str-rouge`` is their mean), the answers' median length in
words against the references' (ASQA's long answers), and -- for selections that keep each
answer's readings -- the readings per question and the share of gold qa pairs a reading
answers (:func:`ambiqa.optimizers.signals.coverage`), which the objective does not see.

    python -m benchmarks.compile_choice benchmarks/results/compile-v5/diva-labeled-choice.json \\
        --data asqa:train:36 --out benchmarks/results/compile-v5/candidates.md

``--data`` names the training spec the compile read (the validation questions are found in
it by id). Intervals: the paired 95% bootstrap of ``ambiqa.evaluation.stats`` over the
validation questions; at n = 12 they decide little, and the table says "undecided at n"
where they straddle 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from ambiqa.data import load_dataset
from ambiqa.evaluation.registry import get_metric
from ambiqa.evaluation.stats import paired_interval
from ambiqa.fsutil import atomic_write_json, atomic_write_text
from ambiqa.optimizers.artifact import read_artifact
from ambiqa.optimizers.signals import coverage
from benchmarks.compile_targets import judge, words


def _interval(scores: list[float], base: list[float]) -> tuple[float, float]:
    lo, hi, _ = paired_interval("score", [scores], [base])
    return lo, hi


def measure(artifact: Path, data: str) -> dict[str, Any]:
    """Every candidate's row: the manifest's figures plus STR-EM, ROUGE-L and lengths."""
    manifest = read_artifact(artifact)["manifest"]
    selection = (manifest.get("optimizer") or {}).get("selection") or {}
    if not selection.get("candidates"):
        raise SystemExit(f"{artifact}: no selection in its manifest (compiled with --no-select "
                         "or before the choice existed)")
    side = artifact.with_name(artifact.stem + ".selection.jsonl")
    answers: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in side.read_text().splitlines():
        row = json.loads(line)
        answers[row["candidate"]].append(row)
    examples = {str(ex.id): ex for ex in load_dataset(data)}
    str_em, rouge = get_metric("str-em"), get_metric("rouge-l")
    per: dict[str, dict[str, list[float]]] = {}
    for label, rows in answers.items():
        got = {"str-em": [], "rouge-l": [], "words": [], "readings": [], "covered": []}
        for r in rows:
            ex = examples[str(r["id"])]
            pred = {"answer": r["answer"] or ""}
            got["str-em"].append(str_em(ex, pred) if r["answer"] is not None else 0.0)
            got["rouge-l"].append(rouge(ex, pred) if r["answer"] is not None else 0.0)
            got["words"].append(words(r["answer"]))
            if "interpretations" in r or r["answer"] is None:  # rows since readings are kept
                readings = r.get("interpretations") or []
                got["readings"].append(len(readings))
                got["covered"].append(coverage(readings, ex))
        per[label] = got
    ref_words = statistics.median(
        statistics.median(words(t) for t in examples[str(r["id"])].long_answers)
        for r in answers["zero-shot"])
    zero = per["zero-shot"]
    out = []
    for cand in selection["candidates"]:
        label = cand["label"]
        own = per.get(label) or per.get(cand.get("same_as", ""), {})
        row = {k: cand.get(k) for k in ("label", "note", "mean", "diff_vs_zero_shot",
                                        "interval_vs_zero_shot", "lm_calls", "cached_calls",
                                        "memo_hits", "seconds", "errors", "same_as")}
        if own:
            row["str_em"] = statistics.fmean(own["str-em"])
            row["rouge_l"] = statistics.fmean(own["rouge-l"])
            row["median_words"] = statistics.median(own["words"])
            if len(own["readings"]) == len(own["words"]):
                row["readings"] = statistics.fmean(own["readings"])
                row["gold_covered"] = statistics.fmean(own["covered"])
            if label != "zero-shot":
                row["str_em_vs_zero_shot"] = _interval(own["str-em"], zero["str-em"])
                row["rouge_l_vs_zero_shot"] = _interval(own["rouge-l"], zero["rouge-l"])
        out.append(row)
    return {"artifact": str(artifact), "data": data, "metric": selection.get("metric"),
            "n_val": selection.get("n_val"), "shipped": selection.get("shipped"),
            "reason": selection.get("reason"), "reference_median_words": ref_words,
            "candidates": out}


def _ci(diff: float | None, ci: Any, n: int) -> str:
    if diff is None or not ci:
        return "—"
    lo, hi = ci
    return f"{diff:+.3f} [{lo:+.3f}, {hi:+.3f}] ({_decides(lo, hi, n)})"


def _decides(lo: float, hi: float, n: int) -> str:
    verdict = judge(lo, hi, n, low=0.0, strict=True)
    return {"met": "above 0", "missed": "at or below 0"}.get(verdict, verdict)


def _readings(c: dict[str, Any]) -> str:
    """``2.58 (0.392)``; ``–`` for selections stored before the readings were kept."""
    if c.get("readings") is None:
        return "–"
    return f"{c['readings']:.2f} ({c['gold_covered']:.3f})"


def render(m: dict[str, Any], command: str) -> str:
    n = m["n_val"]
    lines = [f"Candidates scored on {n} training questions held out before the teleprompter "
             f"ran (never dev); objective `{m['metric']}`. Shipped: **{m['shipped']}**. "
             f"The compile said: \"{m['reason']}\"", "",
             f"`{command}`", "",
             f"| candidate | {m['metric']} | Δ vs zero-shot [95%] | STR-EM | Δ STR-EM [95%] | "
             "ROUGE-L | Δ ROUGE-L [95%] | median words (refs "
             f"{m['reference_median_words']:g}) | LM calls (from the response cache) | "
             "from memo | seconds | readings / q (gold pairs a reading answers) |",
             "|---|---:|---|---:|---|---:|---|---:|---:|---:|---:|---:|"]
    for c in m["candidates"]:
        label = f"**{c['label']}**" if c["label"] == m["shipped"] else c["label"]
        if c.get("same_as"):
            lines.append(f"| {label} | {c['mean']:.3f} | (the same program as "
                         f"{c['same_as']}) | | | | | | 0 | | 0 | |")
            continue

        def pair(key: str, c: dict[str, Any] = c) -> str:
            ci = c.get(key)
            if not ci:
                return "—"
            base = next(x for x in m["candidates"] if x["label"] == "zero-shot")
            metric = key.split("_vs_")[0]
            diff = c[metric] - base[metric]
            return f"{diff:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}] ({_decides(ci[0], ci[1], n)})"

        cached = f" ({c['cached_calls']})" if c.get("cached_calls") else ""
        lines.append(
            f"| {label} | {c['mean']:.3f} | "
            f"{_ci(c['diff_vs_zero_shot'], c['interval_vs_zero_shot'], n)} | "
            f"{c.get('str_em', float('nan')):.3f} | {pair('str_em_vs_zero_shot')} | "
            f"{c.get('rouge_l', float('nan')):.3f} | {pair('rouge_l_vs_zero_shot')} | "
            f"{c.get('median_words', float('nan')):g} | {c['lm_calls']}{cached} | "
            f"{c.get('memo_hits') or 0} | {c['seconds']:.0f} | {_readings(c)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifact", type=Path)
    ap.add_argument("--data", required=True, help="the training spec the compile read")
    ap.add_argument("--out", type=Path, help="write the table here (and a .json beside it)")
    args = ap.parse_args(argv)
    m = measure(args.artifact, args.data)
    command = "python -m benchmarks.compile_choice " + " ".join(
        [str(args.artifact), "--data", args.data]
        + (["--out", str(args.out)] if args.out else []))
    text = render(m, command)
    if args.out:
        atomic_write_text(args.out, text)
        atomic_write_json(args.out.with_suffix(".json"), m)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
