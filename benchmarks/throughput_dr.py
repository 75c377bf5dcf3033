"""D-F1 and DR for the answers of a ``benchmarks.throughput`` run, old side paired with new
(no LM call).

``benchmarks.throughput`` scores each answer by STR-EM and ROUGE-Lsum only: it times the LM,
and a reader in that process would share the cores with it. Issue 45 asks for "the same
answers" in DR too (the paired DR difference, new − old, with its lower end above −0.04), so
this reads the stored answers afterwards with the shipped reader
(``extractive:minilm-asqa-v4``, a STAND-IN for the ASQA paper's RoBERTa-large SQuAD 2.0
reader) and pairs the two sides of each program on the questions both answered: STR-EM,
ROUGE-L, D-F1 and DR (ASQA's set-level sqrt(mean D-F1 × mean ROUGE-L)), each new − old with
its 95% paired bootstrap interval (:func:`ambiqa.evaluation.stats.paired_comparison`, the one
``ambiqa compare`` uses), and the median answer length of each side (the issue's "within
20% of today's"). ``--since`` keeps the blocks ``benchmarks.throughput --since`` keeps.

    python -m benchmarks.throughput_dr benchmarks/results/throughput-lean-toc-verdict

Writes ``dr.md`` and ``dr.json`` beside the run's ``rows.jsonl`` (temp file + rename).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.fsutil import atomic_write_json, atomic_write_text
from benchmarks.throughput import blocks_since, load_rows

METRICS = ("str-em", "rouge-l", "d-f1", "dr")
#: the issue's bounds: paired lower end above this for "the same answers", and the median
#: answer length within this share of the old side's
LOWER_BOUND = -0.04
LENGTH_SHARE = 0.20
#: the questions the issue asks for before "the same answers" can be met (Diva 60, ToC and
#: VerDICt 30); fewer is undecided whatever the interval says
MIN_N = {"diva": 60, "toc": 30, "verdict": 30}


def read_question_rows(run_dir: Path, since: str | None = None) -> list[dict[str, Any]]:
    path = Path(run_dir) / "rows.jsonl"
    if not path.is_file():
        raise ConfigError(f"{path}: no rows.jsonl", hint="name a benchmarks.throughput --out")
    rows = load_rows(path)  # throughput's own reader: a torn last line is skipped, as there
    if since:
        rows = blocks_since(rows, since)
    return [r for r in rows if r.get("kind") == "question"]


def as_eval_rows(rows: list[dict[str, Any]], questions: dict[str, Any], reader: Any
                 ) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Per (program, side), the rows in ``ambiqa evaluate``'s shape (id, metrics, error), each
    answer read by ``reader`` for D-F1; an errored answer stays an error (scored 0)."""
    from ambiqa.evaluation.metrics import disambig_f1, rouge_lsum, str_em

    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        ex = questions.get(str(r["qid"]))
        if ex is None:
            raise ConfigError(f"question {r['qid']} is not in ASQA dev")
        answer = str(r.get("answer") or "")
        row: dict[str, Any] = {"id": str(r["qid"]), "error": r.get("error"),
                               "words": len(answer.split())}
        if not r.get("error"):
            row["metrics"] = {"str-em": str_em(answer, ex.qa_pairs),
                              "rouge-l": rouge_lsum(answer, ex.long_answers),
                              "d-f1": disambig_f1(answer, list(ex.qa_pairs), reader)}
        out.setdefault((r["program"], r["side"]), []).append(row)
    return out


def compare(by_side: dict[tuple[str, str], list[dict[str, Any]]]) -> dict[str, Any]:
    """Per program: new − old on the questions both sides answered, and the median lengths."""
    from ambiqa.evaluation.stats import paired_comparison

    result: dict[str, Any] = {}
    for program in sorted({p for p, _ in by_side}):
        old, new = by_side.get((program, "old"), []), by_side.get((program, "new"), [])
        shared = {r["id"] for r in old} & {r["id"] for r in new}
        old = [r for r in old if r["id"] in shared]
        new = [r for r in new if r["id"] in shared]
        if not shared:
            continue
        entry: dict[str, Any] = {"n": len(shared),
                                 "failed": {"old": sum(bool(r["error"]) for r in old),
                                            "new": sum(bool(r["error"]) for r in new)}}
        for metric in METRICS:
            p = paired_comparison(old, new, metric)
            entry[metric] = {"old": p["baseline_mean"], "new": p["run_mean"],
                             "diff": p["diff"], "ci95": p["ci95"]}
        words = {s: statistics.median(r["words"] for r in rows)
                 for s, rows in (("old", old), ("new", new))}
        entry["median_words"] = words
        entry["length_change"] = (words["new"] - words["old"]) / words["old"] \
            if words["old"] else float("nan")
        result[program] = entry
    return result


def same_answers(entry: dict[str, Any], metric: str, program: str = "") -> str:
    """The issue's reading of one paired difference: missed when the whole interval is below
    the bound, met when its lower end is above it and n reaches the program's
    :data:`MIN_N`, undecided otherwise (a bootstrap over a handful of questions can show a
    zero-width interval that decides nothing)."""
    lo, hi = entry[metric]["ci95"]
    n, needed = entry["n"], MIN_N.get(program, 30)
    if hi < LOWER_BOUND:
        return "missed"
    if lo > LOWER_BOUND and n >= needed:
        return "met"
    return f"undecided at n = {n}" + (f" (asks n >= {needed})" if n < needed else "")


def render(result: dict[str, Any], command: str) -> str:
    lines = [f"# D-F1 and DR of a throughput run's answers, new − old (`{command}`)", "",
             "No LM call. D-F1 read by `extractive:minilm-asqa-v4`, a stand-in for the ASQA "
             "paper's RoBERTa reader; DR = sqrt(mean D-F1 × mean ROUGE-L) over the set; 95% "
             "paired bootstrap intervals over the questions both sides answered (a failed "
             f"answer scores 0). \"Same answers\": the lower end above {LOWER_BOUND}; median "
             f"length within {LENGTH_SHARE:.0%} of the old side's.", "",
             "| program | n | " + " | ".join(f"{m} old / new, diff [95% CI]" for m in METRICS)
             + " | DR same? | STR-EM same? | median words old / new |",
             "|---|---:|" + "---|" * len(METRICS) + "---|---|---|"]
    for program, e in result.items():
        cells = [f"{e[m]['old']:.3f} / {e[m]['new']:.3f}, {e[m]['diff']:+.3f} "
                 f"[{e[m]['ci95'][0]:+.3f}, {e[m]['ci95'][1]:+.3f}]" for m in METRICS]
        w = e["median_words"]
        within = abs(e["length_change"]) <= LENGTH_SHARE
        lines.append(f"| {program} | {e['n']} | " + " | ".join(cells)
                     + f" | {same_answers(e, 'dr', program)} | "
                     f"{same_answers(e, 'str-em', program)} | "
                     f"{w['old']:g} / {w['new']:g} ({e['length_change']:+.0%}, "
                     f"{'within' if within else 'outside'} {LENGTH_SHARE:.0%}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a benchmarks.throughput --out directory")
    ap.add_argument("--since", default=None, help="only the blocks stamped at or after this")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    try:
        rows = read_question_rows(args.run, args.since)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from ambiqa.data.specs import load_dataset
    from ambiqa.evaluation.extractive import ExtractiveReader, default_reader_dir
    from ambiqa.evaluation.shipped_reader import ensure_installed
    from ambiqa.tracing import track

    path = default_reader_dir()
    ensure_installed(path)
    reader = ExtractiveReader(path, threads=args.threads)
    questions = {str(e.id): e for e in load_dataset("asqa:dev")}
    with track() as trace:
        result = compare(as_eval_rows(rows, questions, reader))
    if trace.lm_calls:
        raise SystemExit(f"reading D-F1 made {trace.lm_calls} LM calls; it must make none")
    command = "python -m benchmarks.throughput_dr " + " ".join(argv or sys.argv[1:])
    suffix = f"-since-{args.since}" if args.since else ""
    atomic_write_json(args.run / f"dr{suffix}.json",
                      {"reader": reader.name, "since": args.since, "programs": result})
    text = render(result, command.strip())
    atomic_write_text(args.run / f"dr{suffix}.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
