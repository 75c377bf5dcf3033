"""Diva's retrieval verifier against silver labels from data, before and after issue 12 item 3.

Silver label of one verification vote: the pseudo-interpretation is matched to the gold
disambiguated question (ASQA ``qa_pairs``) it is closest to (cosine, the shared MiniLM
encoder); the vote's label is *yes* when one of that pair's short answers occurs, normalised
(SQuAD normalisation, word boundaries), in the passages Diva kept, else *no*. The question's
label is *RAG-worthy* when any gold short answer occurs in the kept passages. The labels come
from data only; no LM judges them.

Per question, the shared part runs once: Diva's typing and rewrites (eq. 3), diversified
retrieval (eq. 4) and pruning (eq. 5), with the new Diva's defaults. Then two verifiers judge
the same interpretations against the same kept passages:

* ``before`` -- the verifier as it was: interpretation before passages, a ``bool`` output with
  no reasoning, an unreadable vote counted as "no", and closed-book when no vote says yes;
  decoding as the program had it (the LM's defaults: greedy, 512 tokens).
* ``after`` -- :meth:`ambiqa.programs.diva.Diva.verify_all`: passages first, the evidence
  sentence quoted before a one-word yes/no, unreadable votes abstain, RAG when none parsed;
  the paper's decoding (temperature 0.3, top-p 1, 300 tokens).

Reported per arm: vote precision / recall / F1 of "yes" against the silver label, the share of
votes that abstained, and the path split (RAG vs closed-book), with 95% bootstrap intervals
over questions (votes are resampled with their question) and paired differences.

Rows are appended (fsynced) to ``--out`` (one JSON line per question), so a killed run resumes
where it stopped. ``--report`` only re-renders the Markdown from the rows.

    python -m benchmarks.verifier --n 24 --index dense:wiki-dense
    python -m benchmarks.verifier --report

``--faithfulness`` prints (``--run`` executes) the paired ``ambiqa evaluate`` runs of issue 12
items 1 and 6 (Diva with and without the skip on type None, n >= 30; ToC with the paper's and
the strict self-verification, n >= 20) and the ``ambiqa compare`` commands that pair them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

import dspy  # noqa: E402

import ambiqa  # noqa: E402,F401  (sets LITELLM_LOCAL_MODEL_COST_MAP before DSPy loads)
from ambiqa.evaluation.metrics import normalize_answer  # noqa: E402
from ambiqa.fsutil import atomic_write_text  # noqa: E402
from ambiqa.signatures.verification import VerifyInterpretation  # noqa: E402

RESULTS = HERE / "results"
DEFAULT_OUT = RESULTS / "verifier.jsonl"


#: The bare-bool verifier Diva used before issue 12. The signature itself is unchanged in the
#: library (the evaluation judge still uses it), so "before" is the library's own class, not a copy.
LegacyVerifyInterpretation = VerifyInterpretation


# ---- silver labels -----------------------------------------------------------------------


def occurs(answer: str, text_norm: str) -> bool:
    """Does the normalised ``answer`` occur in normalised text, on word boundaries?"""
    a = normalize_answer(answer)
    return bool(a) and re.search(rf"(?<!\w){re.escape(a)}(?!\w)", text_norm) is not None


def silver_labels(interpretations: list[str], qa_pairs: list[dict[str, Any]],
                  passages_text: str, encoder: Any) -> tuple[list[bool], list[int], bool]:
    """Per interpretation: (label, index of the matched gold pair); and the question label."""
    import numpy as np

    text = normalize_answer(passages_text)
    found = [any(occurs(a, text) for a in qa["short_answers"]) for qa in qa_pairs]
    if not qa_pairs:
        return [False] * len(interpretations), [-1] * len(interpretations), False
    vecs = np.asarray(encoder.encode(interpretations + [qa["question"] for qa in qa_pairs]),
                      dtype=np.float64)
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    sims = vecs[: len(interpretations)] @ vecs[len(interpretations):].T
    match = [int(np.argmax(row)) for row in sims]
    return [found[j] for j in match], match, any(found)


# ---- one question ------------------------------------------------------------------------


def _lm_cost(trace: Any) -> dict[str, Any]:
    s = trace.summary()
    return {"lm_calls": s.get("lm_calls"), "input_tokens": s.get("input_tokens"),
            "output_tokens": s.get("output_tokens"), "events": s.get("events", [])}


def run_question(ex: Any, diva: Any, encoder: Any, interpretations: str = "diva",
                 max_votes: int = 0) -> dict[str, Any]:
    from ambiqa.parallel import run_parallel
    from ambiqa.programs.base import format_passages, safe_step
    from ambiqa.programs.diva import PARTIAL, UNVERIFIED, USEFUL, USELESS
    from ambiqa.tracing import track

    row: dict[str, Any] = {"id": ex.id, "question": ex.question}
    t0 = time.perf_counter()
    with track() as t_shared:
        if interpretations == "gold":  # the annotated DQs: no LM call, exact silver labels
            inferred = {"ambiguity_type": None,
                        "interpretations": [qa["question"] for qa in ex.qa_pairs]}
        else:
            inferred = diva.infer(question=ex.question)
        queries = inferred["interpretations"][: max_votes or None]
        kept = diva.prune(queries, diva.diversify(ex.question, queries))
    row["shared_s"] = round(time.perf_counter() - t0, 2)
    row["shared_cost"] = _lm_cost(t_shared)
    row["ambiguity_type"] = inferred["ambiguity_type"]
    row["interpretations"] = queries
    row["kept"] = [p.id for p in kept]
    context = format_passages(kept)
    labels, match, q_label = silver_labels(queries, ex.qa_pairs, context, encoder)
    if interpretations == "gold":  # each DQ is its own gold pair
        text = normalize_answer(context)
        labels = [any(occurs(a, text) for a in qa["short_answers"])
                  for qa in ex.qa_pairs[: len(queries)]]
        match = list(range(len(queries)))
    row["silver"] = labels
    row["matched_pair"] = match
    row["silver_question"] = q_label

    # before: the old signature, old decoding, unparsed = "no", closed-book unless a yes
    legacy = dspy.Predict(LegacyVerifyInterpretation)

    def old_vote(q: str) -> bool | None:
        pred = safe_step("verify", lambda: legacy(interpretation=q, passages=context), None)
        return None if pred is None else bool(pred.supported)

    t0 = time.perf_counter()
    with track() as t_before:
        before = run_parallel(old_vote, queries) if kept else [False] * len(queries)
    yes = sum(1 for v in before if v is True)
    row["before"] = {
        "votes": before,
        "verdict": USEFUL if yes == len(before) else USELESS if yes == 0 else PARTIAL,
        "path": "rag" if yes else "closed_book",
        "seconds": round(time.perf_counter() - t0, 2), "cost": _lm_cost(t_before)}

    t0 = time.perf_counter()
    with track() as t_after:
        votes, verdict = diva.verify_all(queries, kept)
    row["after"] = {
        "votes": [v["supported"] for v in votes],
        "evidence": [v["evidence"] for v in votes],
        "verdict": verdict,
        "path": "closed_book" if verdict == USELESS else "rag",
        "seconds": round(time.perf_counter() - t0, 2), "cost": _lm_cost(t_after)}
    assert verdict in (USEFUL, PARTIAL, USELESS, UNVERIFIED)
    return row


# ---- statistics --------------------------------------------------------------------------


def vote_stats(rows: list[dict[str, Any]], arm: str) -> dict[str, float]:
    """Precision / recall / F1 of 'yes' against silver over all votes; abstentions counted
    apart (an abstained vote is neither a yes nor a no)."""
    tp = fp = fn = tn = ab = ab_pos = 0
    for r in rows:
        for vote, gold in zip(r[arm]["votes"], r["silver"], strict=True):
            if vote is None:
                ab += 1
                ab_pos += bool(gold)
            elif vote and gold:
                tp += 1
            elif vote:
                fp += 1
            elif gold:
                fn += 1
            else:
                tn += 1
    n = tp + fp + fn + tn + ab
    prec = tp / (tp + fp) if tp + fp else float("nan")
    rec = tp / (tp + fn + ab_pos) if tp + fn + ab_pos else float("nan")
    f1 = 2 * prec * rec / (prec + rec) if prec == prec and rec == rec and prec + rec else 0.0
    return {"precision": prec, "recall": rec, "f1": f1, "yes_rate": (tp + fp) / n if n else 0.0,
            "abstain_rate": ab / n if n else 0.0, "votes": n,
            "rag_share": sum(r[arm]["path"] == "rag" for r in rows) / len(rows) if rows else 0.0,
            "path_accuracy": (sum((r[arm]["path"] == "rag") == r["silver_question"]
                                  for r in rows) / len(rows)) if rows else 0.0}


def bootstrap(rows: list[dict[str, Any]], fn: Any, n: int = 1000, seed: int = 0
              ) -> tuple[float, float]:
    """95% percentile interval of ``fn(resampled rows)`` (NaN draws dropped)."""
    rng = random.Random(seed)
    vals = sorted(v for v in (fn(rng.choices(rows, k=len(rows))) for _ in range(n)) if v == v)
    if not vals:
        return float("nan"), float("nan")
    return vals[int(0.025 * len(vals))], vals[max(0, int(0.975 * len(vals)) - 1)]


def _f(x: float) -> str:
    return "n/a" if x != x else f"{x:.2f}"


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    keys = ["precision", "recall", "f1", "yes_rate", "abstain_rate", "rag_share",
            "path_accuracy"]
    arms = {a: vote_stats(rows, a) for a in ("before", "after")}
    lines = [
        "# Diva's retrieval verifier against silver labels (issue 12 item 3)", "",
        f"n = {len(rows)} ASQA dev questions ({meta.get('data')}), "
        f"{arms['after']['votes']} votes; LM `{meta.get('lm')}`, retriever "
        f"`{meta.get('index')}`; interpretations judged: "
        f"{meta.get('interpretations', 'diva')} (max {meta.get('max_votes') or 'all'} per "
        "question); the interpretations, retrieval and pruning are shared, only "
        "the verification differs. Silver label of a vote: a short answer of "
        + ("that gold disambiguated question" if meta.get("interpretations") == "gold" else
           "the gold disambiguated question nearest to the interpretation")
        + " occurs in the kept passages; of a question: any gold short answer occurs there. "
        "Cells: value [95% bootstrap "
        "interval over questions]; Δ = after − before, paired on the same questions.", "",
        "| measure | before | after | Δ (after − before) |", "|---|---|---|---|"]
    for k in keys:
        b, a = arms["before"][k], arms["after"][k]
        ci_b = bootstrap(rows, lambda rs, k=k: vote_stats(rs, "before")[k])
        ci_a = bootstrap(rows, lambda rs, k=k: vote_stats(rs, "after")[k])
        ci_d = bootstrap(rows, lambda rs, k=k: vote_stats(rs, "after")[k]
                         - vote_stats(rs, "before")[k])
        lines.append(f"| {k} | {_f(b)} [{_f(ci_b[0])}, {_f(ci_b[1])}] | "
                     f"{_f(a)} [{_f(ci_a[0])}, {_f(ci_a[1])}] | "
                     f"{_f(a - b)} [{_f(ci_d[0])}, {_f(ci_d[1])}] |")
    silver_yes = sum(sum(r["silver"]) for r in rows)
    n_votes = sum(len(r["silver"]) for r in rows)
    q_yes = sum(r["silver_question"] for r in rows)
    sec = {a: sum(r[a]["seconds"] for r in rows) / max(1, len(rows)) for a in ("before", "after")}
    out_tok = {a: sum(r[a]["cost"]["output_tokens"] or 0 for r in rows) / max(1, len(rows))
               for a in ("before", "after")}
    lines += [
        "", f"Silver base rates: {silver_yes}/{n_votes} votes labelled yes; {q_yes}/{len(rows)} "
        "questions RAG-worthy (a gold answer in the kept passages).",
        f"Verification time per question: before {sec['before']:.1f} s "
        f"({out_tok['before']:.0f} output tokens), after {sec['after']:.1f} s "
        f"({out_tok['after']:.0f} output tokens; the passages lead its prompt, so llama.cpp's "
        "prompt cache serves them to every vote after the first); shared step "
        f"{sum(r['shared_s'] for r in rows) / max(1, len(rows)):.1f} s.",
        "", "`path_accuracy`: share of questions whose path (RAG / closed-book) matches the "
        "question's silver label. `abstain_rate`: votes that could not be read (before: "
        "counted as no by the old program; here listed apart so both arms are scored alike "
        "— an abstained vote with a yes label counts as a miss in recall).", "",
        *([f"Run note: {meta['note']}", ""] if meta.get("note") else []),
        "Command (resumable: rerun it to add questions):", "", "```", meta.get("command", ""),
        "```", "",
        "Diva's own pseudo-interpretations are scored in the section below (the votes of "
        "the ASQA evidence run, `--from-run`). Issue 12 items 1 and 6 are answered by the "
        "evidence runs too (same model, retriever and questions, paired; BENCHMARKS.md's "
        "evidence section): Diva typed 1 of its 60 ASQA dev questions None, so the optional "
        "skip on None changes one question (`python -m benchmarks.compare_methods --datasets "
        "asqa --programs diva-skip-none`); ToC with the paper's and the strict "
        "self-verification ran on the first 20 (`--programs toc,toc-strict --n 20`). "
        "Stand-alone versions of both comparisons:", "", "```",
        "python -m benchmarks.verifier --faithfulness --run   # prints and runs:",
        *("  " + shlex.join(c) for c in faithfulness_commands(
            "dense:wiki-dense", "embedded", 30, 20, "runs/faithfulness")),
        "```", ""]
    return "\n".join(lines)


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


# ---- votes stored by an evaluation run ---------------------------------------------------


def rows_from_run(run_dir: Path, encoder: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Silver-labelled verifier rows from a finished ``ambiqa evaluate diva`` run (no LM call).

    Each stored prediction carries Diva's pseudo-interpretations, its votes, verdict and path
    and the kept passages; the silver labels are computed exactly as for a live run. Failed
    questions (no prediction) are skipped and counted.
    """
    from ambiqa.data import load_dataset
    from ambiqa.evaluation.reports.report import load_run

    run = load_run(run_dir)
    if run.spec.program != "diva":
        raise SystemExit(f"{run_dir} is a {run.spec.program!r} run; --from-run needs diva")
    examples = {ex.id: ex for ex in load_dataset(run.spec.data)}
    rows, failed = [], 0
    for r in run.rows:
        pred = r.get("prediction") or {}
        ex = examples.get(r["id"])
        if r.get("error") or not pred.get("votes") or ex is None:
            failed += 1
            continue
        queries = [v["interpretation"] for v in pred["votes"]]
        context = "\n".join(f"{p.get('title', '')}: {p.get('text', '')}"
                            for p in pred.get("passages") or [])
        labels, match, q_label = silver_labels(queries, ex.qa_pairs, context, encoder)
        rows.append({"id": r["id"], "question": ex.question, "silver": labels,
                     "matched_pair": match, "silver_question": q_label,
                     "ambiguity_type": pred.get("ambiguity_type"),
                     "run": {"votes": [v["supported"] for v in pred["votes"]],
                             "verdict": pred.get("verdict"), "path": pred.get("path")}})
    meta = {"data": run.spec.data, "lm": run.spec.lm, "index": run.spec.index,
            "run_dir": str(run_dir), "failed": failed}
    return rows, meta


def render_run(rows: list[dict[str, Any]], meta: dict[str, Any], command: str) -> str:
    """The verifier's precision / recall and the path split inside one evaluation run."""
    from collections import Counter

    stats = vote_stats(rows, "run")
    keys = ["precision", "recall", "f1", "yes_rate", "abstain_rate", "rag_share",
            "path_accuracy"]
    verdicts = Counter(r["run"]["verdict"] for r in rows)
    types = Counter(r["ambiguity_type"] or "None" for r in rows)
    lines = [
        "### Diva's verifier inside the evidence run (issue 12 item 3, after)", "",
        f"n = {len(rows)} questions of `{meta['data']}` ({meta['failed']} failed, not "
        f"counted), {stats['votes']} votes; LM `{meta['lm']}`, retriever `{meta['index']}`; "
        "the votes, verdicts and paths Diva recorded in the evaluation run, scored against the "
        "silver labels defined above (no LM call here). Cells: value [95% bootstrap interval "
        "over questions].", "",
        "| measure | value |", "|---|---|"]
    for k in keys:
        lo, hi = bootstrap(rows, lambda rs, k=k: vote_stats(rs, "run")[k])
        lines.append(f"| {k} | {_f(stats[k])} [{_f(lo)}, {_f(hi)}] |")
    lines += [
        "", "Verdicts: " + ", ".join(f"{k} {v}" for k, v in verdicts.most_common())
        + ". Ambiguity types: " + ", ".join(f"{k} {v}" for k, v in types.most_common())
        + f". Silver: {sum(sum(r['silver']) for r in rows)}/{stats['votes']} votes yes, "
        f"{sum(r['silver_question'] for r in rows)}/{len(rows)} questions RAG-worthy.", "",
        "```", command, "```", ""]
    return "\n".join(lines)


# ---- driver ------------------------------------------------------------------------------


def load_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill: rerun that question
                continue
    return rows


def append_row(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


FAITHFULNESS = [
    ("diva-always-rewrite", "diva", "{}"),
    ("diva-skip-none", "diva", '{"skip_unambiguous": true}'),
    ("toc-paper-verify", "toc", "{}"),
    ("toc-strict-verify", "toc", '{"verification": "strict"}'),
]


def faithfulness_commands(index: str, lm: str, n_diva: int, n_toc: int, root: str
                          ) -> list[list[str]]:
    cmds = []
    for name, prog, cfg in FAITHFULNESS:
        n = n_diva if prog == "diva" else n_toc
        cmds.append(["ambiqa", "evaluate", prog, "--data", f"asqa:dev:{n}", "--index", index,
                     "--lm", lm, "--program-config", cfg, "--out", f"{root}/{name}", "--resume"])
    cmds.append(["ambiqa", "compare", f"{root}/diva-skip-none", f"{root}/diva-always-rewrite",
                 "--out", f"{root}/compare-diva"])
    cmds.append(["ambiqa", "compare", f"{root}/toc-strict-verify", f"{root}/toc-paper-verify",
                 "--out", f"{root}/compare-toc"])
    return cmds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="asqa:dev")
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--index", default="dense:wiki-dense")
    ap.add_argument("--lm", default="embedded")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--interpretations", choices=("diva", "gold"), default="diva",
                    help="what the verifier judges: Diva's own pseudo-interpretations (typing "
                         "and rewrite calls, labels by the nearest gold DQ) or the annotated "
                         "DQs (no LM call before verification, exact labels)")
    ap.add_argument("--max-votes", type=int, default=0,
                    help="verify at most this many interpretations per question (0: all)")
    ap.add_argument("--report", action="store_true", help="only render the Markdown")
    ap.add_argument("--from-run", type=Path, default=None,
                    help="score the votes a finished `ambiqa evaluate diva` run recorded "
                         "(no LM call); writes --run-out")
    ap.add_argument("--run-out", type=Path, default=RESULTS / "verifier-evidence.md")
    ap.add_argument("--faithfulness", action="store_true",
                    help="print the paired Diva/ToC evaluate runs of items 1 and 6")
    ap.add_argument("--run", action="store_true", help="with --faithfulness: run them")
    ap.add_argument("--runs-dir", default="runs/faithfulness")
    ap.add_argument("--n-diva", type=int, default=30)
    ap.add_argument("--n-toc", type=int, default=20)
    args = ap.parse_args(argv)
    md_path = args.out.with_suffix(".md")
    meta_path = args.out.with_suffix(".meta.json")

    if args.faithfulness:
        cmds = faithfulness_commands(args.index, args.lm, args.n_diva, args.n_toc,
                                     args.runs_dir)
        for c in cmds:
            print(shlex.join(c))
            if args.run:
                subprocess.run(c, check=True)
        return 0

    if args.from_run:
        from ambiqa.retrieval.encoder import get_encoder

        rows, meta = rows_from_run(args.from_run, get_encoder())
        command = "python -m benchmarks.verifier --from-run " + _rel(args.from_run)
        atomic_write_text(args.run_out, render_run(rows, meta, command))
        print(args.run_out.read_text())
        return 0

    if args.report:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        rows = load_rows(args.out)
        atomic_write_text(md_path, render(rows, meta))
        print(md_path.read_text())
        return 0

    from ambiqa.data import load_dataset
    from ambiqa.lm import configure, make_lm
    from ambiqa.programs.diva import Diva
    from ambiqa.retrieval.encoder import get_encoder
    from ambiqa.retrieval.factory import open_retriever

    command = "python -m benchmarks.verifier " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    meta = {"data": args.data, "n": args.n, "index": args.index, "lm": args.lm,
            "interpretations": args.interpretations, "max_votes": args.max_votes,
            "command": command}
    atomic_write_text(meta_path, json.dumps(meta, indent=1) + "\n")
    examples = load_dataset(f"{args.data}:{args.n}")
    done = {r["id"] for r in load_rows(args.out)}
    configure(make_lm(args.lm, cache=False))
    encoder = get_encoder()
    diva = Diva(open_retriever(args.index), encoder=encoder)
    for i, ex in enumerate(examples, start=1):
        if ex.id in done:
            continue
        t0 = time.perf_counter()
        row = run_question(ex, diva, encoder, args.interpretations, args.max_votes)
        append_row(args.out, row)
        print(f"[{i}/{len(examples)}] {time.perf_counter() - t0:.0f}s silver={row['silver']} "
              f"before={row['before']['votes']} after={row['after']['votes']}", flush=True)
    rows = load_rows(args.out)
    atomic_write_text(md_path, render(rows, meta))
    print(md_path.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
