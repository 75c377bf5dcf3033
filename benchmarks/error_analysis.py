"""Error analysis of a missed target (issue 16): why a program loses to its baseline.

Issue 16 asks, for every missed target, for one round of error analysis on 20 failing
questions, counted by cause. This script picks the questions, measures the signals that decide
the cause from stored run rows and the gold data alone (no LM call), and writes a table.

Failing questions: the two runs are paired on the question ids both hold; a question fails
when the program's per-question score is not above the baseline's -- DR (``dr_q``) on ASQA,
token F1 on the short-answer data sets (HotpotQA, NQ, WebQ), where the question's answers
stand in for one qa pair. The ``--n`` with the largest shortfall are taken, ties in split
order, so the choice is deterministic.

Signals per question (ASQA; short-answer runs have the same minus the reader's):

* ``coverage`` -- share of gold qa pairs with a short answer, as a whole normalised token
  sequence, in the passages the program read (what retrieval handed over);
* ``str_em`` -- share of gold qa pairs whose answer the long answer contains (ASQA STR-EM);
* ``d_f1`` -- Disambig-F1 with the run's reader, and what that reader extracted per pair;
* for Diva rows also the verification path and the number of interpretations.

Cause, the first rule that applies:

1. ``verification`` -- (Diva) the passages held a gold answer, the verifier sent the question
   down the closed-book path;
2. ``metric artefact`` -- the long answer contains a gold short answer (STR-EM > 0) yet the
   reader recovered none (D-F1 = 0): the stand-in reader, not the program, scored 0; on
   short-answer data, the answer contains a gold answer but is not one (EM = 0: wordy);
3. ``retrieval miss`` -- no gold answer in any passage read;
4. ``generation`` -- the passages held gold answers the long answer leaves out;
5. ``clarification`` -- the answer holds every gold answer the passages had, but the
   program proposed fewer interpretations than the question has (Diva/ToC/VerDICt rows);
6. ``other`` -- none of the above (e.g. a lower ROUGE-Lsum alone).

The rules only sort; reading decides. ``--notes`` (a JSON object: question id ->
``{"cause": ..., "note": ...}``, written after reading each answer, its passages and the
reader's extractions) gives the cause counted in the table; the rule's guess stays beside it,
so where reading overruled the rule is visible. Without a note the rule's cause is counted.

    python -m benchmarks.error_analysis --run benchmarks/results/evidence/asqa/vanilla_rag \\
        --against benchmarks/results/evidence/asqa/closed_book --n 20
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

import ambiqa  # noqa: E402,F401  (sets LITELLM_LOCAL_MODEL_COST_MAP before DSPy loads)
from ambiqa.evaluation.metrics import (  # noqa: E402
    answer_in_passages,
    field_value,
    short_answers_of,
    str_em,
    token_f1,
)
from ambiqa.fsutil import atomic_write_text  # noqa: E402

CAUSES = ("verification", "metric artefact", "retrieval miss", "generation", "clarification",
          "other")


def by_id(run: Any) -> dict[str, dict[str, Any]]:
    """A loaded run's rows by question id."""
    return {str(row["id"]): row for row in run.rows}


def score_key(rows: dict[str, dict[str, Any]]) -> str:
    """The per-question score a run is judged by: DR where its rows carry one (ASQA), else
    token F1 (the short-answer data sets)."""
    has_dr = any("dr_q" in (row.get("metrics") or {}) for row in rows.values())
    return "dr_q" if has_dr else "f1"


def gold_pairs(example: Any) -> list[Any]:
    """ASQA's qa pairs; a short-answer example is its own single pair (question, answers)."""
    return list(example.get("qa_pairs") or [example])


def row_score(row: dict[str, Any], key: str = "dr_q") -> float:
    """Per-question score (DR by default); a failed row scores 0, as in every headline mean."""
    if row.get("error"):
        return 0.0
    return float((row.get("metrics") or {}).get(key, 0.0))


def failing(program: dict[str, dict[str, Any]], baseline: dict[str, dict[str, Any]],
            order: list[str], n: int, key: str = "dr_q") -> tuple[list[str], int]:
    """The ``n`` paired questions with the largest shortfall, and how many fail at all."""
    position = {qid: i for i, qid in enumerate(order)}
    shared = [q for q in program if q in baseline]
    gaps = sorted((row_score(program[q], key) - row_score(baseline[q], key),
                   position.get(q, 10**9), q) for q in shared)
    fails = [(gap, pos, q) for gap, pos, q in gaps if gap <= 0]
    return [q for _, _, q in fails[:n]], len(fails)


def signals(row: dict[str, Any], qa_pairs: list[Any], reader: Any) -> dict[str, Any]:
    """What decides the cause of one question's loss (see the module docstring)."""
    pred = row.get("prediction") or {}
    texts = [str(p.get("text", "")) for p in pred.get("passages") or []]
    answer = str(pred.get("answer") or "")
    metrics = row.get("metrics") or {}
    covered = [answer_in_passages(short_answers_of(p), texts) for p in qa_pairs]
    extracted = []
    if reader is not None and answer.strip():
        for pair in qa_pairs:
            got = reader.answer(str(field_value(pair, "question", "")), answer)
            extracted.append({"question": str(field_value(pair, "question", "")),
                              "gold": short_answers_of(pair), "reader": got,
                              "f1": round(token_f1(got, short_answers_of(pair)), 3)})
    return {
        "coverage": sum(covered) / len(qa_pairs) if qa_pairs else 0.0,
        # ASQA rows store STR-EM; for short-answer rows the same containment test is run here
        "str_em": float(metrics["str-em"]) if "str-em" in metrics else str_em(answer, qa_pairs),
        "d_f1": float(metrics["d-f1"]) if "d-f1" in metrics else None,
        "em": float(metrics["em"]) if "em" in metrics else None,
        "rouge_l": float(metrics.get("rouge-l", 0.0)),
        "gold_pairs": len(qa_pairs),
        "interpretations": len(pred.get("interpretations") or []),
        "path": pred.get("path"),
        "answer_words": len(answer.split()),
        "error": row.get("error"),
        "reader": extracted,
    }


def cause(sig: dict[str, Any]) -> str:
    """The first rule of the module docstring that applies."""
    if sig["error"]:
        return "other"
    if sig["path"] == "closed_book" and sig["coverage"] > 0:
        return "verification"
    if sig["str_em"] > 0 and (sig["d_f1"] == 0 or (sig["d_f1"] is None and sig["em"] == 0)):
        return "metric artefact"
    if sig["coverage"] == 0:
        return "retrieval miss"
    if sig["str_em"] < sig["coverage"]:
        return "generation"
    if sig["path"] is not None and sig["interpretations"] < sig["gold_pairs"]:
        return "clarification"
    return "other"


def repeats_a_sentence(answer: str) -> bool:
    """Does the answer say one sentence (3+ words) twice? The 1.5B's degenerate loops."""
    sentences = [s.strip().lower() for s in re.split(r"(?<=[.!?:])\s+", answer)
                 if len(s.split()) >= 3]
    return len(sentences) != len(set(sentences))


def output_health(rows: dict[str, dict[str, Any]], ids: list[str],
                  examples: dict[str, Any], reader: Any) -> dict[str, float]:
    """Over the given questions: answers cut at the output cap, answers that loop, length,
    and how often the D-F1 reader recovers an answer the long answer states.

    A qa pair *stated* is one whose short answer the long answer contains (STR-EM's test);
    ``recovered`` counts those where the reader's extraction has token F1 > 0 with the pair's
    answers. The gap between the two is what D-F1 loses to the reader, not to the program.
    Without a reader (short-answer runs) ``recovered`` is None.
    """
    answers = [str((rows[q].get("prediction") or {}).get("answer") or "") for q in ids]
    cut = sum(int((rows[q].get("cost") or {}).get("truncated_calls", 0)) > 0 for q in ids)
    stated = recovered = 0
    for qid, answer in zip(ids, answers, strict=True):
        for pair in gold_pairs(examples[qid]):
            golds = short_answers_of(pair)
            if str_em(answer, [pair]) == 0:
                continue
            stated += 1
            if reader is not None:
                question = str(field_value(pair, "question", ""))
                recovered += token_f1(reader.answer(question, answer), golds) > 0
    return {"n": len(ids), "cut": cut, "loops": sum(map(repeats_a_sentence, answers)),
            "median_words": statistics.median(len(a.split()) for a in answers) if ids else 0,
            "stated": stated, "recovered": recovered if reader is not None else None}


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def render(program: str, baseline: str, picked: list[dict[str, Any]], n_fail: int,
           n_pairs: int, command: str, health: dict[str, dict[str, Any]],
           key: str = "dr_q", data: str = "") -> str:
    """The Markdown report: the count by cause, then one entry per question."""
    counts = Counter(p["cause"] for p in picked)
    read = sum(bool(p["note"]) for p in picked)
    short = key != "dr_q"
    label, score_col = ("F1", "EM") if short else ("DR", "D-F1")
    on = f" on {data}" if data else ""
    lines = [f"# Error analysis: {program} against {baseline}{on}", "",
             f"`{command}`", "",
             f"{n_fail} of {n_pairs} paired questions fail (per-question {label} of {program} not "
             f"above {baseline}'s); the {len(picked)} with the largest shortfall are below, "
             f"ties in split order. {read} of them were read by hand (the note column) and "
             "their cause is the reading's call; for the others, and in the column *rule*, "
             "the cause is the guess of the rules in `benchmarks/error_analysis.py` (stored "
             "rows and gold data, no LM).", "",
             "| cause | questions |", "|---|---:|"]
    lines += [f"| {c} | {counts[c]} |" for c in CAUSES if counts[c]]
    lines += ["", f"| # | question | cause | rule | Δ{label} | coverage | "
              f"{'contains' if short else 'STR-EM'} | {score_col} | words | note |",
              "|---:|---|---|---|---:|---:|---:|---:|---:|---|"]
    for i, p in enumerate(picked, 1):
        s = p["signals"]
        score = s["em"] if short else s["d_f1"]
        lines.append(f"| {i} | {_cut(p['question'], 70)} | {p['cause']} | {p['rule']} | "
                     f"{p['gap']:+.3f} | "
                     f"{s['coverage']:.2f} | {s['str_em']:.2f} | "
                     + ("–" if score is None else f"{score:.2f}") + " | "
                     f"{s['answer_words']} | {_cut(p['note'], 220)} |")
    lines += ["", "Output health over the questions every listed run holds: an LM call cut at "
              "its output cap; an answer that says one sentence twice; qa pairs whose short "
              "answer the long answer states (STR-EM's test), and of those, how many the D-F1 "
              "reader recovers (token F1 > 0):", "",
              "| run | n | cut at the cap | repeats a sentence | median words | pairs stated "
              "| recovered by the reader |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {name} | {h['n']} | {h['cut']} | {h['loops']} | {h['median_words']:g} | "
              f"{h['stated']} | "
              + ("– (no reader)" if h["recovered"] is None else f"{h['recovered']}"
                 + (f" ({h['recovered'] / h['stated']:.0%})" if h["stated"] else "")) + " |"
              for name, h in health.items()]
    lines += ["", "Coverage: share of gold qa pairs with an answer in the passages read. "
              "Words: length of the answer. `--json` keeps each answer and what the "
              "reader extracted per qa pair."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="the program's run directory")
    ap.add_argument("--against", type=Path, required=True, help="the baseline's run directory")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--also", type=Path, action="append", default=[],
                    help="another run directory to put in the output-health table")
    ap.add_argument("--notes", type=Path, default=None, help="JSON: question id -> note")
    ap.add_argument("--out", type=Path, default=None,
                    help="Markdown report (default: <run>/../error-analysis-<program>.md)")
    ap.add_argument("--json", type=Path, default=None, help="also write the signals as JSON")
    args = ap.parse_args(argv)

    from ambiqa.data.specs import load_dataset
    from ambiqa.errors import AmbiqaError
    from ambiqa.evaluation.reader import make_reader
    from ambiqa.evaluation.reports.report import load_run

    try:
        run, against = load_run(args.run), load_run(args.against)
        also = [load_run(extra) for extra in args.also]
    except AmbiqaError as exc:
        ap.error(str(exc))
    spec, base_spec = asdict(run.spec), asdict(against.spec)
    rows, base = by_id(run), by_id(against)
    examples = {str(e["id"]): e for e in load_dataset(spec["data"])}
    order = list(examples)
    key = score_key(rows)
    ids, n_fail = failing(rows, base, order, args.n, key)
    notes = json.loads(args.notes.read_text(encoding="utf-8")) if args.notes else {}
    # D-F1's reader matters on ASQA only; short answers are scored against the answers as given
    reader = make_reader(spec.get("reader") or None) if key == "dr_q" else None

    picked = []
    for qid in ids:
        qa_pairs = gold_pairs(examples[qid])
        sig = signals(rows[qid], qa_pairs, reader)
        rule = cause(sig)
        read = notes.get(qid) or {}
        if read and read.get("cause") not in CAUSES:
            ap.error(f"{args.notes}: question {qid} has cause {read.get('cause')!r}; "
                     f"expected one of {', '.join(CAUSES)}")
        picked.append({"id": qid, "question": rows[qid]["question"],
                       "cause": read.get("cause", rule), "rule": rule,
                       "gap": row_score(rows[qid], key) - row_score(base[qid], key), "signals": sig,
                       "answer": (rows[qid].get("prediction") or {}).get("answer", ""),
                       "note": read.get("note", "")})

    command = ("python -m benchmarks.error_analysis --run " + _rel(args.run) + " --against "
               + _rel(args.against) + f" --n {args.n}"
               + "".join(f" --also {_rel(run)}" for run in args.also)
               + (f" --notes {_rel(args.notes)}" if args.notes else ""))
    out = args.out or args.run.parent / f"error-analysis-{spec['program']}.md"
    n_pairs = sum(q in base for q in rows)
    others = {r.path.name: by_id(r) for r in also}
    common = [q for q in order if q in rows and q in base and all(q in o for o in others.values())]
    health = {spec["program"]: output_health(rows, common, examples, reader),
              base_spec["program"]: output_health(base, common, examples, reader)}
    health.update({name: output_health(o, common, examples, reader)
                   for name, o in others.items()})
    atomic_write_text(out, render(spec["program"], base_spec["program"], picked, n_fail,
                                  n_pairs, command, health, key, spec["data"]))
    if args.json:
        atomic_write_text(args.json, json.dumps(picked, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {_rel(out)}: " + ", ".join(
        f"{c} {k}" for c, k in Counter(p["cause"] for p in picked).most_common()))
    return 0


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    raise SystemExit(main())
