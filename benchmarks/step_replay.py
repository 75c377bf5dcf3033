"""One step of Diva changed, the rest replayed: the changed step's tokens and the answers,
paired with the default program on the same questions (issue 45, fewer output tokens).

An arm that changes one prompt -- the verifier writing the answer's few words instead of a
copied sentence (``verify_evidence="brief"``), the writer asked for at most N words
(``answer_words``) -- re-sends every other prompt unchanged, so the response cache answers them
and only the changed step (and whatever its output changes downstream) reaches the LM. Reads
two stored ``ambiqa evaluate diva`` runs over the same questions -- the default and the arm --
and, for the default side's token counts, the run that first decoded its replies
(``--stored``: a replayed run answers from the cache and counts no tokens). No LM call.
Reports, over the questions both runs answered:

* whether the two arms verified the same readings (typing and rewriting replayed from the
  cache give the same pseudo-interpretations; a question where they differ is not paired on
  the verifier and is counted apart);
* vote, verdict and path agreement, abstentions, and each arm's path accuracy against the
  silver label of the question (a gold short answer occurs in the kept passages: the RAG
  path is right; none does: closed book is right -- the label of ``benchmarks/verifier.py``);
* the changed step's output and computed prompt tokens per call and per question, and its
  replies cut at the output cap (arm: this run; default: ``--stored``), with the paired
  difference per question;
* STR-EM and ROUGE-L paired (arm − default) and the answers' median words, so a cheaper step
  is kept only if the answers stay the same.

    python -m benchmarks.step_replay benchmarks/results/loop-guard/runs/on \\
        benchmarks/results/step-replay/runs/brief \\
        --signature VerifyRetrieval:VerifyRetrievalBrief \\
        --stored benchmarks/results/compile-v4/runs/diva-zeroshot --data asqa:dev \\
        --out benchmarks/results/step-replay/brief
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

ARMS = ("default", "arm")


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
    return {"n": p["n_shared"], "default": p["baseline_mean"], "arm": p["run_mean"],
            "diff": p["diff"], "ci95": p["ci95"]}


def step_tokens(rows: dict[str, dict[str, Any]], ids: list[str], name: str
                ) -> dict[str, Any]:
    """One signature's calls, tokens per call and cut replies over ``ids``, and its output
    tokens per question (for the paired difference)."""
    qs = [q for q in ids if _sig(rows.get(q), name).get("calls")]
    calls = sum(_sig(rows[q], name)["calls"] for q in qs)

    def per_call(key: str) -> float | None:
        return sum(_sig(rows[q], name).get(key, 0) for q in qs) / calls if calls else None

    return {"signature": name, "questions": len(qs), "calls": calls,
            "output_per_call": per_call("output_tokens"),
            "computed_per_call": per_call("computed_tokens"),
            "max_output": max((_sig(rows[q], name).get("max_output_tokens", 0) for q in qs),
                              default=None),
            "truncated": sum(_sig(rows[q], name).get("truncated", 0) for q in qs),
            "per_question": {q: float(_sig(rows[q], name).get("output_tokens", 0))
                             for q in qs}}


def summarize(default_run: Path, arm_run: Path, stored: Path | None, gold: dict[str, Any],
              signature: str, arm_signature: str) -> dict[str, Any]:
    base, arm = answered(default_run), answered(arm_run)
    first = answered(stored) if stored else base
    ids = sorted(set(base) & set(arm))
    same = [q for q in ids if _pred(base[q]).get("pseudo_interpretations")
            == _pred(arm[q]).get("pseudo_interpretations")]
    votes_same = votes_n = verdict_same = path_same = 0
    abst = dict.fromkeys(ARMS, 0)
    n_votes = dict.fromkeys(ARMS, 0)
    path_ok: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    changed: list[dict[str, Any]] = []
    for q in same:
        a, b = _pred(base[q]), _pred(arm[q])
        for side, p in zip(ARMS, (a, b), strict=True):
            vs = [v.get("supported") for v in p.get("votes") or []]
            n_votes[side] += len(vs)
            abst[side] += sum(v is None for v in vs)
        for va, vb in zip(a.get("votes") or [], b.get("votes") or [], strict=False):
            if va.get("supported") is not None and vb.get("supported") is not None:
                votes_n += 1
                votes_same += va["supported"] == vb["supported"]
        verdict_same += a.get("verdict") == b.get("verdict")
        path_same += a.get("path") == b.get("path")
        label = silver_rag(a, gold[q].qa_pairs) if q in gold else None
        if label is not None:
            path_ok["default"][q] = float((a.get("path") == "rag") == label)
            path_ok["arm"][q] = float((b.get("path") == "rag") == label)
        if a.get("path") != b.get("path"):
            changed.append({"id": q, "question": base[q]["question"], "silver_rag": label,
                            **{side: {"path": p.get("path"), "verdict": p.get("verdict"),
                                      "metrics": r[q].get("metrics"),
                                      "evidence": [v.get("evidence")
                                                   for v in p.get("votes") or []]}
                               for side, p, r in (("default", a, base), ("arm", b, arm))}})
    # tokens: the arm as this run decoded them, the default as the stored run first did
    tok = {"default": step_tokens(first, same, signature),
           "arm": step_tokens(arm, same, arm_signature)}
    per_q = _paired(tok["default"].pop("per_question"), tok["arm"].pop("per_question"),
                    "step_output_tokens")
    quality = {m: _paired({q: float(base[q]["metrics"][m]) for q in ids},
                          {q: float(arm[q]["metrics"][m]) for q in ids}, m)
               for m in ("str-em", "rouge-l")}
    return {
        "default_run": rel(default_run, ROOT), "arm_run": rel(arm_run, ROOT),
        "stored": rel(stored, ROOT) if stored else None, "paired": len(ids),
        "same_readings": len(same), "votes": n_votes, "abstained": abst,
        "votes_compared": votes_n, "votes_agree": votes_same,
        "verdict_agree": verdict_same, "path_agree": path_same,
        "path_accuracy": _paired(path_ok["default"], path_ok["arm"], "path_correct"),
        "tokens": tok, "step_output_per_question": per_q, "quality": quality,
        "median_words": {side: statistics.median(words(_pred(r[q]).get("answer"))
                                                 for q in ids) if ids else None
                         for side, r in (("default", base), ("arm", arm))},
        "path_changed": changed,
    }


def _d(p: dict[str, Any]) -> str:
    return f"{p['diff']:+.3f} {fmt_interval(*p['ci95'])} (n = {p['n']})"


def _f(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def render(s: dict[str, Any], command: str, title: str) -> str:
    t, pa, per_q = s["tokens"], s["path_accuracy"], s["step_output_per_question"]
    sd, sa = t["default"]["signature"], t["arm"]["signature"]
    lines = [
        f"# {title}", "", f"`{command}`", "",
        f"Default: `{s['default_run']}` (its tokens from `{s['stored']}`, the run that first "
        f"decoded its replies); arm: `{s['arm_run']}`. {s['paired']} questions answered by "
        f"both; on {s['same_readings']} the two verified the same readings (typing and "
        "rewriting replayed from the response cache).", "",
        "| measure | default | arm | Δ arm − default [95%] |", "|---|---:|---:|---|",
        f"| `{sd}` / `{sa}` output tokens per call | {_f(t['default']['output_per_call'])} | "
        f"{_f(t['arm']['output_per_call'])} | |",
        f"| the same, per question | {_f(per_q['default'])} | {_f(per_q['arm'])} | "
        f"{_d(per_q)} |",
        f"| its computed prompt tokens per call | {_f(t['default']['computed_per_call'])} | "
        f"{_f(t['arm']['computed_per_call'])} | |",
        f"| its replies cut at the output cap (of calls) | {t['default']['truncated']} "
        f"({t['default']['calls']}) | {t['arm']['truncated']} ({t['arm']['calls']}) | |",
        f"| verification votes abstained (unreadable) | {s['abstained']['default']} of "
        f"{s['votes']['default']} | {s['abstained']['arm']} of {s['votes']['arm']} | |",
        f"| path accuracy against the silver label | {pa['default']:.3f} | {pa['arm']:.3f} "
        f"| {_d(pa)} |",
    ]
    for m, q in s["quality"].items():
        lines.append(f"| {m.upper()} | {q['default']:.3f} | {q['arm']:.3f} | {_d(q)} |")
    mw = s["median_words"]
    lines += [f"| median answer words | {_f(mw['default'])} | {_f(mw['arm'])} | |", "",
              f"Agreement: votes {s['votes_agree']} of {s['votes_compared']} read by both; "
              f"verdict {s['verdict_agree']} of {s['same_readings']}; path "
              f"{s['path_agree']} of {s['same_readings']}. Silver label: a gold short answer "
              "occurs in the kept passages (RAG is right) or none does (closed book is "
              "right).", ""]
    if s["path_changed"]:
        lines += ["Questions whose path changed:", "",
                  "| question | silver: RAG right | default path (STR-EM, ROUGE-L) "
                  "| arm path (STR-EM, ROUGE-L) | arm's evidence |", "|---|---|---|---|---|"]
        for c in s["path_changed"]:
            def cell(side: dict[str, Any]) -> str:
                m = side.get("metrics") or {}
                return (f"{side['path']} / {side['verdict']} ({m.get('str-em', 0):.2f}, "
                        f"{m.get('rouge-l', 0):.2f})")
            ev = "; ".join(str(e)[:60] for e in c["arm"]["evidence"])
            lines.append(f"| {c['question']} | {c['silver_rag']} | {cell(c['default'])} | "
                         f"{cell(c['arm'])} | {ev} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("default_run", type=Path)
    ap.add_argument("arm_run", type=Path)
    ap.add_argument("--signature", required=True,
                    help="the changed step's signature, DEFAULT[:ARM] when the arm sends "
                         "another (VerifyRetrieval:VerifyRetrievalBrief)")
    ap.add_argument("--title", default=None, help="the report's heading")
    ap.add_argument("--stored", type=Path, default=None,
                    help="the run that first decoded the default's replies (its tokens)")
    ap.add_argument("--data", required=True, help="the runs' split, e.g. asqa:dev")
    ap.add_argument("--out", type=Path, default=None, help="folder for summary.json / .md")
    args = ap.parse_args(argv)
    for run in (args.default_run, args.arm_run, args.stored):
        if run is not None and not (run / "results.jsonl").is_file():
            raise SystemExit(f"step_replay: no results.jsonl in {run}")
    sig_default, _, sig_arm = args.signature.partition(":")
    from ambiqa.data import load_dataset

    gold = {str(ex.id): ex for ex in load_dataset(args.data)}
    s = summarize(args.default_run, args.arm_run, args.stored, gold, sig_default,
                  sig_arm or sig_default)
    command = (f"python -m benchmarks.step_replay {rel(args.default_run, ROOT)} "
               f"{rel(args.arm_run, ROOT)} --signature {args.signature}"
               + (f" --stored {rel(args.stored, ROOT)}" if args.stored else "")
               + f" --data {args.data}" + (f" --out {rel(args.out, ROOT)}" if args.out else ""))
    title = args.title or f"Diva with one step changed ({args.signature}), paired"
    text = render(s, command, title)
    print(text, end="")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / "summary.json", json.dumps(s, indent=1) + "\n")
        atomic_write_text(args.out / "summary.md", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
