"""Diva's retrieval verifier, zero-shot vs demos chosen by its own signal (paired, ASQA dev).

Issue 34's target: "Compiled Diva's verifier: path accuracy against its signal >= 0.8, both
paths taken". The stored compiles chose the verifier's demos by the end metric, so both demos
said yes and Diva never took its closed-book path. This measures the ``--predictor-signal``
remedy on the verifier alone, with the real prompt (``Diva.vote``: ambiqa's own
``dspy.Predict(VerifyRetrieval)`` and Diva's decoding) and the default embedded model.

* **Dev items**: the verifier inputs of the stored zero-shot Diva ASQA dev rows
  (``benchmarks/results/evidence/asqa/diva/results.jsonl``, the rows
  ``benchmarks.predictor_signal`` reads): for each of the first ``--n`` questions, every
  pseudo-interpretation Diva voted on, against the passages it kept. Both variants judge the
  same items (paired).
* **Signal** (:mod:`ambiqa.optimizers.signals`): a gold short answer occurs in the judged
  passages -> ``yes``; the question's path should be RAG iff so. The path a variant takes is
  Diva's rule: closed-book when every parsed vote says no, RAG otherwise (also Unverified).
* **Demos** (``signal`` variant): from training data only (``asqa:train``, never a dev
  question). For each training question, Diva's own retrieval (eq. 4 diversify, eq. 5 prune,
  no LM call) with the gold disambiguated questions as the interpretations gives verifier
  inputs; :func:`ambiqa.optimizers.signals.signal_demos` then picks ``--k`` demos balanced
  yes/no. No LM call is made on training data, so every candidate is a relabelled one
  (``signals.relabel``: verdict from the signal, evidence = the passage line holding the gold
  answer, or "none") -- the fallback the compile uses when no call got a class right.

One JSON row per judged item is appended (fsynced) to ``rows.jsonl``; a rerun skips done
items. Calls are grouped by variant (all zero-shot items, then all signal items) and, inside a
variant, by question, so the engine's prompt cache reuses the demos and the shared passages.

    python -m benchmarks.verifier_signal --n 20
    python -m benchmarks.verifier_signal --report
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

import ambiqa  # noqa: E402,F401  (sets LITELLM_LOCAL_MODEL_COST_MAP before DSPy loads)
from ambiqa.fsutil import atomic_write_json, atomic_write_text  # noqa: E402
from ambiqa.optimizers.signals import NO, YES, states_gold  # noqa: E402

STORED = HERE / "results" / "evidence" / "asqa" / "diva" / "results.jsonl"
OUT = HERE / "results" / "verifier-signal"
VARIANTS = ("zero_shot", "signal")


def load_json_lines(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file (a torn last line from a killed run is skipped)."""
    if not path.exists():
        return []
    rows = []
    for line in path.open(encoding="utf-8"):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def dev_items(n: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The verifier inputs of the first ``n`` stored Diva rows, with their signal."""
    from ambiqa.data import load_dataset
    from ambiqa.programs.base import format_passages
    from ambiqa.types import Passage

    rows = [r for r in load_json_lines(STORED) if isinstance(r.get("prediction"), dict)
            and not r.get("error")][:n]
    gold = {str(ex.id): ex for ex in load_dataset("asqa:dev")}
    items = []
    for qi, row in enumerate(rows):
        pred, ex = row["prediction"], gold[str(row["id"])]
        kept = [Passage(str(p["id"]), str(p.get("title", "")), str(p.get("text", "")))
                for p in pred.get("passages") or []]
        context = format_passages(kept)
        expected = YES if states_gold([p.text for p in kept], ex) else NO
        for vi, vote in enumerate(pred.get("votes") or []):
            items.append({"key": f"{row['id']}#{vi}", "qid": str(row["id"]), "q_index": qi,
                          "interpretation": str(vote["interpretation"]), "context": context,
                          "expected": expected, "stored_vote": vote.get("supported")})
    return items, {"questions": len(rows)}


def signal_demos_from_train(diva: Any, n_train: int, k: int, seed: int) -> dict[str, Any]:
    """Give ``diva.verify`` ``k`` signal demos built from ``asqa:train`` (no LM call)."""
    from ambiqa.data import load_dataset
    from ambiqa.optimizers.signals import Step, TraceRecord, signal_demos
    from ambiqa.programs.base import format_passages

    train = list(load_dataset("asqa:train"))
    random.Random(seed).shuffle(train)
    records = []
    classes: dict[str, int] = {YES: 0, NO: 0}
    for ex in train[:n_train]:
        queries = [str(p["question"]) for p in ex.qa_pairs][: diva.max_interpretations]
        if not queries:
            continue
        kept = diva.prune(queries, diva.diversify(ex.question, queries))
        context = format_passages(kept)
        classes[YES if states_gold([p.text for p in kept], ex) else NO] += 1
        steps = [Step("verify", "VerifyRetrieval",
                      {"passages": context, "interpretation": q}, {}) for q in queries[:1]]
        records.append(TraceRecord(ex, None, 0.0, steps))
        if classes[YES] >= 2 and classes[NO] >= 2:
            break
    chosen = signal_demos(diva, records, k, seed=seed)
    demos = [{"interpretation": d["interpretation"], "verdict": d["verdict"],
              "evidence": str(d["evidence"])[:200]} for d in diva.verify.demos]
    train_ids = [str(r.example.id) for r in records]
    return {"train_questions": train_ids, "train_classes": classes,
            "report": chosen.get("verify"), "demos": demos}


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append one JSON line and fsync it, so a killed run loses at most the call in flight."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


# ---- statistics --------------------------------------------------------------------------
def path_of(votes: list[bool | None]) -> str:
    """Diva's rule: closed-book only when every parsed vote says no."""
    parsed = [v for v in votes if v is not None]
    return "closed_book" if parsed and not any(parsed) else "rag"


def per_question(rows: list[dict[str, Any]], variant: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["variant"] != variant:
            continue
        q = out.setdefault(r["qid"], {"votes": [], "expected": r["expected"],
                                      "q_index": r["q_index"], "right": []})
        q["votes"].append(r["vote"])
        q["right"].append(r["vote"] == (r["expected"] == YES))
    for q in out.values():
        q["path"] = path_of(q["votes"])
        q["path_right"] = q["path"] == ("rag" if q["expected"] == YES else "closed_book")
    return out


def bootstrap_diff(a: list[float], b: list[float], n: int = 2000, seed: int = 0
                   ) -> tuple[float, float]:
    """95% percentile interval of mean(b - a) over paired resamples."""
    rng = random.Random(seed)
    d = [y - x for x, y in zip(a, b, strict=True)]
    means = sorted(sum(d[rng.randrange(len(d))] for _ in d) / len(d) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


def summarize(rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """Per variant: vote and path accuracy against the signal, classes, cost; paired diffs
    on the questions (and items) both variants finished."""
    qs = {v: per_question(rows, v) for v in VARIANTS}
    shared = sorted(set(qs["zero_shot"]) & set(qs["signal"]),
                    key=lambda k: qs["zero_shot"][k]["q_index"])
    # a question counts only when both variants judged all of its items
    shared = [k for k in shared if len(qs["zero_shot"][k]["votes"]) ==
              len(qs["signal"][k]["votes"]) == meta.get("items_per_q", {}).get(k, -1)]
    out: dict[str, Any] = {"questions": len(shared), "variants": {}}
    for v in VARIANTS:
        sel = [qs[v][k] for k in shared]
        vrows = [r for r in rows if r["variant"] == v and r["qid"] in set(shared)]
        votes = [r["vote"] for r in vrows]
        out["variants"][v] = {
            "items": len(vrows),
            "vote_accuracy": sum(r["vote"] == (r["expected"] == YES) for r in vrows)
            / max(len(vrows), 1),
            "votes": {"yes": votes.count(True), "no": votes.count(False),
                      "unreadable": votes.count(None)},
            "vote_right_by_expected": {
                c: f"{sum(r['vote'] == (c == YES) for r in vrows if r['expected'] == c)}/"
                   f"{sum(r['expected'] == c for r in vrows)}" for c in (YES, NO)},
            "path_accuracy": sum(q["path_right"] for q in sel) / max(len(sel), 1),
            "paths": {"rag": sum(q["path"] == "rag" for q in sel),
                      "closed_book": sum(q["path"] == "closed_book" for q in sel)},
            "path_right_by_expected": {
                p: f"{sum(q['path_right'] for q in sel if q['expected'] == c)}/"
                   f"{sum(q['expected'] == c for q in sel)}"
                for p, c in (("rag", YES), ("closed_book", NO))},
            "lm_calls": sum(r["lm_calls"] for r in vrows),
            "seconds": round(sum(r["seconds"] for r in vrows), 1)}
    if shared:
        a = [float(qs["zero_shot"][k]["path_right"]) for k in shared]
        b = [float(qs["signal"][k]["path_right"]) for k in shared]
        lo, hi = bootstrap_diff(a, b)
        out["path_diff"] = {"diff": sum(b) / len(b) - sum(a) / len(a), "low": lo, "high": hi,
                            "n": len(shared)}
        # vote accuracy, resampled by question (votes travel with their question)
        va = [sum(qs["zero_shot"][k]["right"]) / len(qs["zero_shot"][k]["right"])
              for k in shared]
        vb = [sum(qs["signal"][k]["right"]) / len(qs["signal"][k]["right"]) for k in shared]
        lo, hi = bootstrap_diff(va, vb)
        out["vote_diff_per_question"] = {"diff": sum(vb) / len(vb) - sum(va) / len(va),
                                         "low": lo, "high": hi, "n": len(shared)}
    return out


def render(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    s = summary
    lines = ["# Diva's verifier: zero-shot vs demos chosen by its own signal (ASQA dev)", "",
             "Generated by `python -m benchmarks.verifier_signal --n "
             f"{meta.get('n')}` (`--report` re-renders). Default embedded model "
             f"({meta.get('lm')}), Diva's decoding {meta.get('decoding')}, LM cache off. Items: "
             "the verifier inputs of the stored zero-shot Diva ASQA dev rows "
             "(`benchmarks/results/evidence/asqa/diva/results.jsonl`), same items for both "
             "variants. Signal (`ambiqa/optimizers/signals.py`): a gold short answer in the "
             "judged passages -> yes; path RAG iff so (Diva: closed-book when every parsed "
             "vote says no).", "",
             f"Paired questions: {s['questions']} (of {meta.get('n')} asked).", "",
             "| variant | items | vote acc | votes yes/no/unreadable | vote right (yes, no) | "
             "path acc | paths rag/closed | path right (rag, closed) | LM calls | seconds |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for v, t in s["variants"].items():
        vv, p = t["votes"], t["paths"]
        lines.append(
            f"| {v} | {t['items']} | {t['vote_accuracy']:.3f} | {vv['yes']}/{vv['no']}/"
            f"{vv['unreadable']} | {t['vote_right_by_expected'][YES]}, "
            f"{t['vote_right_by_expected'][NO]} | {t['path_accuracy']:.3f} | {p['rag']}/"
            f"{p['closed_book']} | {t['path_right_by_expected']['rag']}, "
            f"{t['path_right_by_expected']['closed_book']} | {t['lm_calls']} | "
            f"{t['seconds']} |")
    for key, name in (("path_diff", "path accuracy"),
                      ("vote_diff_per_question", "vote accuracy (mean per question)")):
        if key in s:
            d = s[key]
            lines.append("")
            lines.append(f"Paired difference signal - zero_shot, {name}: {d['diff']:+.3f} "
                         f"[{d['low']:+.3f}, {d['high']:+.3f}] (95% bootstrap over "
                         f"questions, n = {d['n']}).")
    demo = meta.get("demos") or {}
    lines += ["", "Signal demos (from `asqa:train` only; every one relabelled from the signal, "
              "no LM call on training data): " + ", ".join(
                  f"{d['verdict']}" for d in demo.get("demos", [])) +
              f"; training questions looked at: {len(demo.get('train_questions', []))} "
              f"(classes {demo.get('train_classes')}).", ""]
    if meta.get("note"):
        lines += [str(meta["note"]), ""]
    return "\n".join(lines)


# ---- main --------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="first N stored questions")
    ap.add_argument("--k", type=int, default=2, help="signal demos (balanced yes/no)")
    ap.add_argument("--n-train", type=int, default=40, help="training questions to look at")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--index", default="dense:wiki-dense")
    ap.add_argument("--lm", default=None, help="LM spec (default: the embedded model)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--report", action="store_true", help="only re-render from the rows")
    ap.add_argument("--note", default=None, help="a line for summary.md (kept in meta.json)")
    args = ap.parse_args(argv)
    rows_path, meta_path = args.out / "rows.jsonl", args.out / "meta.json"
    items, info = dev_items(args.n)
    meta: dict[str, Any] = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta.update({"n": args.n, "items": len(items), **info, "items_per_q": {}})
    if args.note is not None:
        meta["note"] = args.note
        if args.report:
            atomic_write_json(meta_path, meta)
    for it in items:
        meta["items_per_q"][it["qid"]] = meta["items_per_q"].get(it["qid"], 0) + 1
    if not args.report:
        from ambiqa.lm import configure, make_lm
        from ambiqa.programs.diva import Diva
        from ambiqa.retrieval.factory import open_retriever
        from ambiqa.tracing import track

        lm = make_lm(args.lm, cache=False)
        configure(lm)
        diva = Diva(open_retriever(args.index))
        meta.update({"lm": str(getattr(lm, "model", args.lm)), "decoding": diva.lm_config,
                     "index": args.index, "k": args.k})
        demos = signal_demos_from_train(diva, args.n_train, args.k, args.seed)
        meta["demos"] = demos
        signal_demos = list(diva.verify.demos)
        atomic_write_json(meta_path, meta)
        print(json.dumps({k: demos[k] for k in ("train_classes", "report")}), flush=True)
        done = {(r["variant"], r["key"]) for r in load_json_lines(rows_path)}
        for variant in args.variants.split(","):
            diva.verify.demos = [] if variant == "zero_shot" else signal_demos
            for it in items:
                if (variant, it["key"]) in done:
                    continue
                t0 = time.perf_counter()
                with track() as t:
                    vote, evidence = diva.vote(it["interpretation"], it["context"])
                row = {"variant": variant, **{k: it[k] for k in (
                    "key", "qid", "q_index", "interpretation", "expected")},
                    "vote": vote, "evidence": evidence[:300],
                    "seconds": round(time.perf_counter() - t0, 2),
                    "lm_calls": t.summary().get("lm_calls"),
                    "cost": {k: t.summary().get(k) for k in (
                        "input_tokens", "cached_tokens", "output_tokens", "format_retries")}}
                append_row(rows_path, row)
                print(f"{variant} {it['key']} exp={it['expected']} vote={vote} "
                      f"{row['seconds']}s", flush=True)
    rows = [r for r in load_json_lines(rows_path)
            if r["key"] in {it["key"] for it in items}]
    summary = summarize(rows, meta)
    atomic_write_json(args.out / "summary.json", {"meta": {k: v for k, v in meta.items()
                                                           if k != "items_per_q"},
                                                  "summary": summary})
    atomic_write_text(args.out / "summary.md", render(summary, meta))
    print(render(summary, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
