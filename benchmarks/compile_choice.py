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
it by id). ``--reader`` (``shipped``: the reader that ships with ambiqa, or any spec
:func:`ambiqa.evaluation.reader.make_reader` takes) also reads each stored answer for D-F1
and adds D-F1 and DR (``sqrt(mean D-F1 × mean ROUGE-L)`` over the validation questions, as
ASQA reports it) with their paired intervals, and the candidate a ``--metric dr`` compile
would have shipped by the same rule: ``select.choose`` ranks a set-level objective by its
statistic over the validation set and ships the best, zero-shot on a tie -- for compiles
made with a reader-free objective, no LM call. Beside it, the mean of each question's own
``sqrt(D-F1 × ROUGE-L)`` ("per-question DR"), which is how the choice ranked DR before it
took the set-level statistic, and the candidate that ranking picks where it differs.
Intervals: the paired 95% bootstrap of ``ambiqa.evaluation.stats`` over the validation
questions; at n = 12 they decide little, and the table says "undecided at n"
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


def measure(artifact: Path, data: str, reader: Any = None) -> dict[str, Any]:
    """Every candidate's row: the manifest's figures plus STR-EM, ROUGE-L and lengths; with a
    ``reader`` (:class:`ambiqa.evaluation.reader.Reader`) D-F1 and DR too."""
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
    str_em, rouge, d_f1 = get_metric("str-em"), get_metric("rouge-l"), get_metric("d-f1")
    per: dict[str, dict[str, list[float]]] = {}
    for label, rows in answers.items():
        got: dict[str, list[float]] = {"str-em": [], "rouge-l": [], "words": [],
                                       "readings": [], "covered": [], "d-f1": []}
        for r in rows:
            ex = examples[str(r["id"])]
            pred = {"answer": r["answer"] or ""}
            got["str-em"].append(str_em(ex, pred) if r["answer"] is not None else 0.0)
            got["rouge-l"].append(rouge(ex, pred) if r["answer"] is not None else 0.0)
            if reader is not None:
                got["d-f1"].append(d_f1(ex, pred, reader) if r["answer"] is not None else 0.0)
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
            if reader is not None:
                row.update(_read(own, zero, label == "zero-shot"))
        out.append(row)
    result = {"artifact": str(artifact), "data": data, "metric": selection.get("metric"),
              "n_val": selection.get("n_val"), "shipped": selection.get("shipped"),
              "reason": selection.get("reason"), "reference_median_words": ref_words,
              "candidates": out}
    if reader is not None:
        result["reader"] = getattr(reader, "name", type(reader).__name__)
        result["shipped_by_dr"] = shipped_by(out, "dr")
        result["shipped_by_dr_q"] = shipped_by(out, "dr_q")
    return result


def _read(own: dict[str, list[float]], zero: dict[str, list[float]], is_zero: bool
          ) -> dict[str, Any]:
    """D-F1 and DR of one candidate, with paired intervals against zero-shot; ``dr_q`` is the
    mean of the per-question roots (how the choice ranked DR before the set-level statistic)."""
    from ambiqa.evaluation.metrics import dr_score
    from ambiqa.evaluation.stats import set_value

    row: dict[str, Any] = {
        "d_f1": statistics.fmean(own["d-f1"]),
        "dr": set_value("dr", [own["d-f1"], own["rouge-l"]]),
        "dr_q": statistics.fmean(dr_score(d, r)
                                 for d, r in zip(own["d-f1"], own["rouge-l"], strict=True))}
    if not is_zero:
        row["d_f1_vs_zero_shot"] = _interval(own["d-f1"], zero["d-f1"])
        lo, hi, _ = paired_interval("dr", [own["d-f1"], own["rouge-l"]],
                                    [zero["d-f1"], zero["rouge-l"]])
        row["dr_vs_zero_shot"] = (lo, hi)
    return row


def shipped_by(candidates: list[dict[str, Any]], key: str) -> str:
    """The label ``select.choose``'s rule ships when the objective is ``key``: the highest
    value, zero-shot unless something is strictly above it (duplicates are never scored)."""
    scored = [c for c in candidates if c.get(key) is not None and not c.get("same_as")]
    zero = next(c for c in scored if c["label"] == "zero-shot")
    best = max(scored, key=lambda c: (c[key], c["label"] == "zero-shot"))
    return best["label"] if best[key] > zero[key] else "zero-shot"


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
    if m.get("reader"):
        lines += _render_read(m, n)
    return "\n".join(lines) + "\n"


def _render_read(m: dict[str, Any], n: int) -> list[str]:
    """The same candidates read by a D-F1 reader: D-F1, DR and what DR would have shipped."""
    lines = ["", f"Read by `{m['reader']}` (a stand-in for the ASQA paper's RoBERTa reader; "
             "no LM call). DR = sqrt(mean D-F1 × mean ROUGE-L) over the validation questions, "
             "what a `--metric dr` compile ranks; per-question DR = the mean of each "
             "question's sqrt(D-F1 × ROUGE-L), how the choice ranked DR before. By the same "
             f"rule such a compile would have shipped **{m['shipped_by_dr']}**"
             + (" -- the same candidate." if m["shipped_by_dr"] == m["shipped"]
                else f" (the compile shipped {m['shipped']}).")
             + (f" Ranked by per-question DR: {m['shipped_by_dr_q']}."
                if m["shipped_by_dr_q"] != m["shipped_by_dr"] else ""), "",
             "| candidate | D-F1 | Δ D-F1 [95%] | DR | Δ DR [95%] | per-question DR |",
             "|---|---:|---|---:|---|---:|"]
    base = next(x for x in m["candidates"] if x["label"] == "zero-shot")
    for c in m["candidates"]:
        if c.get("same_as") or c.get("dr") is None:
            continue
        label = f"**{c['label']}**" if c["label"] == m["shipped_by_dr"] else c["label"]
        cells = []
        for key in ("d_f1", "dr"):
            ci = c.get(f"{key}_vs_zero_shot")
            cells.append(f"{c[key]:.3f}")
            cells.append(_ci(c[key] - base[key], ci, n) if ci else "—")
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {c['dr_q']:.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifact", type=Path)
    ap.add_argument("--data", required=True, help="the training spec the compile read")
    ap.add_argument("--out", type=Path, help="write the table here (and a .json beside it)")
    ap.add_argument("--reader", default=None,
                    help="also read D-F1 and DR: 'shipped' (the reader that ships with "
                         "ambiqa) or a reader spec (ambiqa.evaluation.reader.make_reader)")
    args = ap.parse_args(argv)
    reader = None
    if args.reader:
        from ambiqa.evaluation.reader import make_reader

        reader = make_reader(None if args.reader == "shipped" else args.reader)
    m = measure(args.artifact, args.data, reader)
    command = "python -m benchmarks.compile_choice " + " ".join(
        [str(args.artifact), "--data", args.data]
        + (["--reader", args.reader] if args.reader else [])
        + (["--out", str(args.out)] if args.out else []))
    text = render(m, command)
    if args.out:
        atomic_write_text(args.out, text)
        atomic_write_json(args.out.with_suffix(".json"), m)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
