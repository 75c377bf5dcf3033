"""Diva's verifier writing the answer's few words instead of a copied sentence, paired with
the default verifier on the same questions (issue 45, shorter reasoning fields).

Reads two stored ``ambiqa evaluate diva`` runs over the same questions -- the default
(``verify_evidence="sentence"``) and ``verify_evidence="brief"`` -- and, for the sentence
side's token counts, the run that first decoded those replies (``--stored``: a replayed run
answers from the response cache and counts no tokens). No LM call. Reports, over the
questions both runs answered:

* whether the two arms verified the same readings (typing and rewriting replayed from the
  cache give the same pseudo-interpretations; a question where they differ is not paired on
  the verifier and is counted apart);
* vote, verdict and path agreement, abstentions, and each arm's path accuracy against the
  silver label of the question (a gold short answer occurs in the kept passages: the RAG
  path is right; none does: closed book is right -- the label of ``benchmarks/verifier.py``);
* the verifier's output and computed prompt tokens per call and per question (brief: this
  run; sentence: ``--stored``), with the paired difference per question;
* STR-EM and ROUGE-L paired (brief − sentence) and the answers' median words, so a shorter
  verifier is kept only if the answers stay the same.

    python -m benchmarks.verifier_brief benchmarks/results/loop-guard/runs/on \\
        benchmarks/results/verifier-brief/runs/brief \\
        --stored benchmarks/results/compile-v4/runs/diva-zeroshot --data asqa:dev \\
        --out benchmarks/results/verifier-brief
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from ambiqa.evaluation.stats import fmt_interval, paired_comparison
from ambiqa.fsutil import atomic_write_text
from ambiqa.text import normalize_answer
from benchmarks.readings import answered
from benchmarks.stored_runs import ROOT, rel, words
from benchmarks.verifier import occurs

SENTENCE, BRIEF = "VerifyRetrieval", "VerifyRetrievalBrief"


def _pred(row: dict[str, Any]) -> dict[str, Any]:
    return row.get("prediction") or {}


def _sig(row: dict[str, Any] | None, name: str) -> dict[str, Any]:
    return ((row or {}).get("cost") or {}).get("by_signature", {}).get(name) or {}


def silver_rag(pred: dict[str, Any], qa_pairs: list[dict[str, Any]]) -> bool:
    """True when a gold short answer occurs in the kept passages (the RAG path is right)."""
    text = normalize_answer(" ".join(f"{p.get('title', '')}: {p.get('text', '')}"
                                     for p in pred.get("passages") or []))
    return any(occurs(a, text) for qa in qa_pairs for a in qa.get("short_answers") or [])


def _metric_rows(values: dict[str, float], name: str) -> list[dict[str, Any]]:
    return [{"id": qid, "metrics": {name: v}} for qid, v in values.items()]


def _paired(base: dict[str, float], run: dict[str, float], name: str) -> dict[str, Any]:
    p = paired_comparison(_metric_rows(base, name), _metric_rows(run, name), name)
    return {"n": p["n_shared"], "sentence": p["baseline_mean"], "brief": p["run_mean"],
            "diff": p["diff"], "ci95": p["ci95"]}


def summarize(sentence_run: Path, brief_run: Path, stored: Path | None,
              gold: dict[str, Any]) -> dict[str, Any]:
    base, brief = answered(sentence_run), answered(brief_run)
    first = answered(stored) if stored else {}
    ids = sorted(set(base) & set(brief))
    same_readings = [q for q in ids if _pred(base[q]).get("pseudo_interpretations")
                     == _pred(brief[q]).get("pseudo_interpretations")]
    votes_same = votes_n = 0
    abst = {"sentence": 0, "brief": 0}
    n_votes = {"sentence": 0, "brief": 0}
    verdict_same = path_same = 0
    path_ok: dict[str, dict[str, float]] = {"sentence": {}, "brief": {}}
    changed: list[dict[str, Any]] = []
    for q in same_readings:
        a, b = _pred(base[q]), _pred(brief[q])
        for arm, p in (("sentence", a), ("brief", b)):
            vs = [v.get("supported") for v in p.get("votes") or []]
            n_votes[arm] += len(vs)
            abst[arm] += sum(v is None for v in vs)
        for va, vb in zip(a.get("votes") or [], b.get("votes") or [], strict=False):
            if va.get("supported") is not None and vb.get("supported") is not None:
                votes_n += 1
                votes_same += va["supported"] == vb["supported"]
        verdict_same += a.get("verdict") == b.get("verdict")
        path_same += a.get("path") == b.get("path")
        label = silver_rag(a, gold[q].qa_pairs) if q in gold else None
        if label is not None:
            path_ok["sentence"][q] = float((a.get("path") == "rag") == label)
            path_ok["brief"][q] = float((b.get("path") == "rag") == label)
        if a.get("path") != b.get("path"):
            changed.append({"id": q, "question": base[q]["question"], "silver_rag": label,
                            "sentence": {"path": a.get("path"), "verdict": a.get("verdict"),
                                         "metrics": base[q].get("metrics")},
                            "brief": {"path": b.get("path"), "verdict": b.get("verdict"),
                                      "metrics": brief[q].get("metrics"),
                                      "evidence": [v.get("evidence") for v in
                                                   b.get("votes") or []]}})
    # tokens: brief as this run decoded them, sentence as the stored run first decoded them
    tok = {}
    for arm, rows, name in (("sentence", first, SENTENCE), ("brief", brief, BRIEF)):
        qs = [q for q in same_readings if _sig(rows.get(q), name).get("calls")]
        calls = sum(_sig(rows[q], name)["calls"] for q in qs)
        tok[arm] = {
            "questions": len(qs), "calls": calls,
            "output_per_call": (sum(_sig(rows[q], name).get("output_tokens", 0) for q in qs)
                                / calls if calls else None),
            "computed_per_call": (sum(_sig(rows[q], name).get("computed_tokens", 0)
                                      for q in qs) / calls if calls else None),
            "max_output": max((_sig(rows[q], name).get("max_output_tokens", 0) for q in qs),
                              default=None),
            "truncated": sum(_sig(rows[q], name).get("truncated", 0) for q in qs),
            "per_question": {q: float(_sig(rows[q], name).get("output_tokens", 0))
                             for q in qs}}
    out_paired = _paired(tok["sentence"].pop("per_question"), tok["brief"].pop("per_question"),
                         "verifier_output_tokens")
    quality = {}
    for m in ("str-em", "rouge-l"):
        quality[m] = _paired({q: float(base[q]["metrics"][m]) for q in ids},
                             {q: float(brief[q]["metrics"][m]) for q in ids}, m)
    return {
        "sentence_run": rel(sentence_run, ROOT), "brief_run": rel(brief_run, ROOT),
        "stored": rel(stored, ROOT) if stored else None, "paired": len(ids),
        "same_readings": len(same_readings), "votes": n_votes, "abstained": abst,
        "votes_compared": votes_n, "votes_agree": votes_same,
        "verdict_agree": verdict_same, "path_agree": path_same,
        "path_accuracy": _paired(path_ok["sentence"], path_ok["brief"], "path_correct"),
        "tokens": tok, "verifier_output_per_question": out_paired, "quality": quality,
        "median_words": {"sentence": statistics.median(words(_pred(base[q]).get("answer"))
                                                       for q in ids) if ids else None,
                         "brief": statistics.median(words(_pred(brief[q]).get("answer"))
                                                    for q in ids) if ids else None},
        "path_changed": changed,
    }


def _d(p: dict[str, Any]) -> str:
    return f"{p['diff']:+.3f} {fmt_interval(*p['ci95'])} (n = {p['n']})"


def _f(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def render(s: dict[str, Any], command: str) -> str:
    t, pa = s["tokens"], s["path_accuracy"]
    lines = [
        "# Diva's verifier: the answer's few words (`brief`) against a copied sentence", "",
        f"`{command}`", "",
        f"Sentence arm: `{s['sentence_run']}`; brief arm: `{s['brief_run']}`; the sentence "
        f"arm's tokens from `{s['stored']}` (the run that first decoded its replies). "
        f"{s['paired']} questions answered by both; on {s['same_readings']} the two verified "
        "the same readings (typing and rewriting replayed from the response cache).", "",
        "| measure | sentence (default) | brief | Δ brief − sentence [95%] |",
        "|---|---:|---:|---|",
        f"| verifier output tokens per call | {_f(t['sentence']['output_per_call'])} | "
        f"{_f(t['brief']['output_per_call'])} | |",
        f"| verifier output tokens per question | "
        f"{_f(s['verifier_output_per_question']['sentence'])} | "
        f"{_f(s['verifier_output_per_question']['brief'])} | "
        f"{_d(s['verifier_output_per_question'])} |",
        f"| verifier computed prompt tokens per call | "
        f"{_f(t['sentence']['computed_per_call'])} | {_f(t['brief']['computed_per_call'])} | |",
        f"| verifier replies cut at the cap (calls) | {t['sentence']['truncated']} "
        f"({t['sentence']['calls']}) | {t['brief']['truncated']} ({t['brief']['calls']}) | |",
        f"| votes abstained (unreadable) | {s['abstained']['sentence']} of "
        f"{s['votes']['sentence']} | {s['abstained']['brief']} of {s['votes']['brief']} | |",
        f"| path accuracy against the silver label | {pa['sentence']:.3f} | {pa['brief']:.3f} "
        f"| {_d(pa)} |",
    ]
    for m, q in s["quality"].items():
        lines.append(f"| {m.upper()} | {q['sentence']:.3f} | {q['brief']:.3f} | {_d(q)} |")
    mw = s["median_words"]
    lines += [f"| median answer words | {_f(mw['sentence'])} | {_f(mw['brief'])} | |", "",
              f"Agreement: votes {s['votes_agree']} of {s['votes_compared']} read by both; "
              f"verdict {s['verdict_agree']} of {s['same_readings']}; path "
              f"{s['path_agree']} of {s['same_readings']}.", ""]
    if s["path_changed"]:
        lines += ["Questions whose path changed:", "",
                  "| question | silver: RAG right | sentence path (STR-EM, ROUGE-L) "
                  "| brief path (STR-EM, ROUGE-L) | brief evidence |", "|---|---|---|---|---|"]
        for c in s["path_changed"]:
            def cell(side: dict[str, Any]) -> str:
                m = side.get("metrics") or {}
                return (f"{side['path']} / {side['verdict']} ({m.get('str-em', 0):.2f}, "
                        f"{m.get('rouge-l', 0):.2f})")
            ev = "; ".join(str(e)[:60] for e in c["brief"]["evidence"])
            lines.append(f"| {c['question']} | {c['silver_rag']} | {cell(c['sentence'])} | "
                         f"{cell(c['brief'])} | {ev} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sentence_run", type=Path)
    ap.add_argument("brief_run", type=Path)
    ap.add_argument("--stored", type=Path, default=None,
                    help="the run that first decoded the sentence arm's replies (tokens)")
    ap.add_argument("--data", required=True, help="the runs' split, e.g. asqa:dev")
    ap.add_argument("--out", type=Path, default=None, help="folder for summary.json / .md")
    args = ap.parse_args(argv)
    for run in (args.sentence_run, args.brief_run, args.stored):
        if run is not None and not (run / "results.jsonl").is_file():
            raise SystemExit(f"verifier_brief: no results.jsonl in {run}")
    from ambiqa.data import load_dataset

    gold = {str(ex.id): ex for ex in load_dataset(args.data)}
    s = summarize(args.sentence_run, args.brief_run, args.stored, gold)
    command = (f"python -m benchmarks.verifier_brief {rel(args.sentence_run, ROOT)} "
               f"{rel(args.brief_run, ROOT)}"
               + (f" --stored {rel(args.stored, ROOT)}" if args.stored else "")
               + f" --data {args.data}" + (f" --out {rel(args.out, ROOT)}" if args.out else ""))
    text = render(s, command)
    print(text, end="")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / "summary.json", json.dumps(s, indent=1) + "\n")
        atomic_write_text(args.out / "summary.md", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
