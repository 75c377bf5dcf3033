"""ToC's self-verification against silver labels from training data, one encoding against another.

With the default 1.5B, ToC's check (the paper's: the original question, the passage holding a
proposed answer, the answer -- could it be correct?) answered as a bare boolean pruned 34 of
the 41 nodes of the few-shot evidence run, 15 of the 21 whose answer was gold. This script
measures the check on nodes built from data, so an encoding can be chosen on **training**
questions before the programs are re-run on dev.

Nodes (no LM proposes them). For each of the first N questions of ``--data`` (ASQA train by
default) and each gold qa pair with an annotated passage that holds one of its short answers
(whole words, :func:`ambiqa.programs.toc.contains_answer`), at most ``--pairs`` per question:

* a **positive** node -- the question, that passage, the short answer: a reading ToC should
  keep;
* a **negative** node -- the question, the same passage, another name or number the passage
  states that is no gold answer of the question and not in the question: the passage mentions
  it, yet it answers nothing the question asks (the hard case for "could it be correct").

Each ``--variants`` entry (``paper``, ``evidence``; see ``TreeOfClarifications``) judges every
node through the program's own ``_verify_node``, so the prompt, the parsing and the
abstention rule are the program's. Reported per variant: recall on positives (kept), the
share of negatives kept, precision of "keep", and abstentions, with 95% bootstrap intervals
over questions (a question's nodes are resampled together), plus the paired difference.

Rows are appended (fsynced) to ``--out`` as one JSON line per question, so a killed run
resumes where it stopped; ``--report`` only re-renders the Markdown.

    python -m benchmarks.toc_verifier --data asqa:train:15 --variants paper,evidence
    python -m benchmarks.toc_verifier --report
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

import ambiqa  # noqa: E402,F401  (sets LITELLM_LOCAL_MODEL_COST_MAP before DSPy loads)
from ambiqa.evaluation.metrics import normalize_answer  # noqa: E402
from ambiqa.fsutil import atomic_write_text  # noqa: E402
from ambiqa.programs.toc import contains_answer  # noqa: E402

DEFAULT_OUT = HERE / "results" / "toc-verifier" / "rows.jsonl"

#: candidate spans for a negative node: runs of capitalised words (a name, a title) or numbers
_SPAN = re.compile(r"\b(?:\d[\d,.]*\d|\d|[A-Z][\w'’&-]*(?:\s+(?:of|the|de|and|for)?\s*"
                   r"[A-Z][\w'’&-]*)*)")
#: capitalised words that start sentences rather than name anything
_NOT_NAMES = frozenset({"the", "a", "an", "in", "on", "it", "he", "she", "they", "his", "her",
                        "this", "that", "these", "after", "before", "during", "when", "as",
                        "at", "by", "for", "from", "with", "its", "their", "there", "while"})


def _overlaps(a: str, b: str) -> bool:
    """Either normalised string holds the other as whole words."""
    return bool(a) and bool(b) and (f" {a} " in f" {b} " or f" {b} " in f" {a} ")


def negative_answer(passage: str, question: str, golds: list[str]) -> str | None:
    """The first name or number in ``passage`` that shares no word with a gold answer (so no
    alias of one) and is not in the question; a number when the gold answer is one (so the
    distractor has the answer's type). A lone capitalised word opening a sentence ("Sadly")
    is no name."""
    gold_words = {w for g in golds for w in normalize_answer(g).split() if w not in _NOT_NAMES}
    q_norm = normalize_answer(question)
    want_number = any(re.search(r"\d", g) for g in golds)
    found = []
    for m in _SPAN.finditer(passage):
        span = m.group(0).strip()
        norm = normalize_answer(span)
        if not norm or norm in _NOT_NAMES or _overlaps(norm, q_norm):
            continue
        if gold_words & set(norm.split()):
            continue
        opens_sentence = passage[:m.start()].rstrip().endswith((".", "!", "?")) or not (
            passage[:m.start()].strip())
        if opens_sentence and " " not in span and not span[0].isdigit():
            continue
        found.append(span)
    typed = [s for s in found if bool(re.search(r"\d", s)) == want_number]
    return (typed or found or [None])[0]


def build_nodes(ex: Any, max_pairs: int) -> list[dict[str, Any]]:
    """The positive and negative nodes of one example (see the module docstring)."""
    from ambiqa.optimizers.demos import gold_passages

    passages = gold_passages(ex)
    all_golds = [a for qa in ex.qa_pairs for a in qa.get("short_answers") or []]
    nodes: list[dict[str, Any]] = []
    pairs_used = 0
    for qa in ex.qa_pairs:
        if pairs_used >= max_pairs:
            break
        hit = next(((p, a) for p in passages for a in qa.get("short_answers") or []
                    if contains_answer(a, p.render())), None)
        if hit is None:
            continue
        passage, answer = hit
        pairs_used += 1
        nodes.append({"passage_id": passage.id, "passage": passage, "answer": answer,
                      "silver": True, "dq": qa["question"]})
        wrong = negative_answer(passage.text, ex.question, all_golds)
        if wrong is not None:
            nodes.append({"passage_id": passage.id, "passage": passage, "answer": wrong,
                          "silver": False, "dq": qa["question"]})
    return nodes


def judge_question(ex: Any, programs: dict[str, Any], max_pairs: int) -> dict[str, Any]:
    """One row: every node of ``ex`` judged by every variant (the program's own check)."""
    from ambiqa.programs.toc import _Node
    from ambiqa.tracing import track

    nodes = build_nodes(ex, max_pairs)
    row: dict[str, Any] = {"id": ex.id, "question": ex.question,
                           "nodes": [{k: v for k, v in n.items() if k != "passage"}
                                     for n in nodes], "verdicts": {}, "cost": {}}
    for name, program in programs.items():
        verdicts, abstained, calls, out_tok, events = [], [], 0, 0, []
        for n in nodes:
            node = _Node(id=1, parent=0, depth=1, question=n["dq"], answer=n["answer"],
                         evidence=[n["passage"]])
            with track() as trace:
                verdicts.append(program._verify_node(ex.question, node))
            s = trace.summary()
            # kept without a verdict: the reply was unreadable or failed to parse
            abstained.append(any("abstained" in e or "degraded" in e
                                 for e in s.get("events", [])))
            calls += s.get("lm_calls") or 0
            out_tok += s.get("output_tokens") or 0
            events += s.get("events", [])
        row["verdicts"][name] = verdicts
        row["abstained"] = {**row.get("abstained", {}), name: abstained}
        row["cost"][name] = {"lm_calls": calls, "output_tokens": out_tok, "events": events}
    return row


# ---- statistics -----------------------------------------------------------------------------


def stats(rows: list[dict[str, Any]], variant: str) -> dict[str, float]:
    """Recall on positives, share of negatives kept, precision of "keep" -- as the program
    decides (an abstention keeps the node) and over the nodes with a read verdict only --
    and the share of abstentions."""
    c = dict.fromkeys(("tp", "fp", "pos", "neg", "ab", "tp_r", "fp_r", "pos_r", "neg_r"), 0)
    for r in rows:
        flags = r.get("abstained", {}).get(variant) or [False] * len(r["nodes"])
        for node, kept, ab in zip(r["nodes"], r["verdicts"][variant], flags, strict=True):
            gold = bool(node["silver"])
            c["pos"] += gold
            c["neg"] += not gold
            c["tp"] += kept and gold
            c["fp"] += kept and not gold
            c["ab"] += ab
            if not ab:
                c["pos_r"] += gold
                c["neg_r"] += not gold
                c["tp_r"] += kept and gold
                c["fp_r"] += kept and not gold

    def ratio(a: int, b: int) -> float:
        return a / b if b else float("nan")

    return {"recall": ratio(c["tp"], c["pos"]), "negatives_kept": ratio(c["fp"], c["neg"]),
            "precision": ratio(c["tp"], c["tp"] + c["fp"]),
            "recall_read": ratio(c["tp_r"], c["pos_r"]),
            "negatives_kept_read": ratio(c["fp_r"], c["neg_r"]),
            "abstained": ratio(c["ab"], c["pos"] + c["neg"]),
            "positives": c["pos"], "negatives": c["neg"]}


def _f(x: float) -> str:
    return "n/a" if x != x else f"{x:.2f}"


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    from benchmarks.verifier import bootstrap  # the percentile bootstrap over questions

    variants = list(meta.get("variants") or (rows[0]["verdicts"] if rows else []))
    first = stats(rows, variants[0]) if rows and variants else {}
    lines = [
        "# ToC's self-verification against silver labels (training data)", "",
        f"n = {len(rows)} questions of `{meta.get('data')}`, {first.get('positives', 0)} "
        f"positive and {first.get('negatives', 0)} negative nodes built from the data (see "
        f"`benchmarks/toc_verifier.py`); LM `{meta.get('lm')}`. Every variant judges the same "
        "nodes through ToC's own check. Cells: value [95% bootstrap interval over questions]"
        + ("; Δ = second − first variant, paired." if len(variants) == 2 else "."), "",
        "| measure | " + " | ".join(variants) + (" | Δ |" if len(variants) == 2 else " |"),
        "|---|" + "---|" * (len(variants) + (len(variants) == 2))]
    for key in ("recall", "negatives_kept", "precision", "recall_read", "negatives_kept_read",
                "abstained"):
        cells = []
        for v in variants:
            lo, hi = bootstrap(rows, lambda rs, v=v, key=key: stats(rs, v)[key])
            cells.append(f"{_f(stats(rows, v)[key])} [{_f(lo)}, {_f(hi)}]")
        if len(variants) == 2:
            a, b = variants

            def diff(rs: list[dict[str, Any]], key: str = key, a: str = a, b: str = b
                     ) -> float:
                return stats(rs, b)[key] - stats(rs, a)[key]

            lo, hi = bootstrap(rows, diff)
            cells.append(f"{diff(rows):+.2f} [{lo:+.2f}, {hi:+.2f}]")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    calls = {v: sum(r["cost"][v]["lm_calls"] or 0 for r in rows) for v in variants}
    out_tok = {v: sum(r["cost"][v]["output_tokens"] or 0 for r in rows) for v in variants}
    lines += ["", "LM calls / output tokens: " + "; ".join(
        f"{v} {calls[v]} / {out_tok[v]}" for v in variants)
        + " (calls served from DSPy's cache count no tokens).", "",
        "`recall`: positives kept; `negatives_kept`: negatives kept (lower is better); "
        "`precision`: share of kept nodes that are positive -- all three as the program "
        "decides, an abstention keeping its node; `*_read`: the same over the nodes whose "
        "verdict was read; `abstained`: nodes kept without a verdict (an unreadable reply, or "
        "one that failed to parse, e.g. cut at the output cap).", "",
        "Command (resumable: rerun it to add questions):", "", "```",
        meta.get("command", ""), "```", ""]
    return "\n".join(lines)


# ---- driver ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="asqa:train:15")
    ap.add_argument("--variants", default="paper,evidence")
    ap.add_argument("--pairs", type=int, default=2, help="gold qa pairs used per question")
    ap.add_argument("--lm", default="embedded")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--report", action="store_true", help="only render the Markdown")
    args = ap.parse_args(argv)
    from benchmarks.verifier import load_rows  # verifier.py's rows file reader (same format)

    md_path = args.out.with_suffix(".md")
    meta_path = args.out.with_suffix(".meta.json")

    if args.report:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        atomic_write_text(md_path, render(load_rows(args.out), meta))
        print(md_path.read_text())
        return 0

    from ambiqa.data import load_dataset
    from ambiqa.errors import ConfigError
    from ambiqa.lm import configure, make_lm
    from ambiqa.programs.toc import VERIFICATIONS, TreeOfClarifications

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VERIFICATIONS]
    if unknown or not variants:
        raise ConfigError(f"unknown verification variant(s) {unknown or args.variants!r}",
                          hint=f"choose from {', '.join(VERIFICATIONS)}")
    command = "python -m benchmarks.toc_verifier " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    meta = {"data": args.data, "variants": variants, "lm": args.lm, "pairs": args.pairs,
            "command": command}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(meta_path, json.dumps(meta, indent=2))
    configure(make_lm(args.lm))
    programs = {v: TreeOfClarifications(verification=v, max_workers=1) for v in variants}
    done = {r["id"] for r in load_rows(args.out)}
    todo = [ex for ex in load_dataset(args.data) if ex.id not in done]
    print(f"{len(done)} questions done, {len(todo)} to go", file=sys.stderr)
    for ex in todo:
        row = judge_question(ex, programs, args.pairs)
        with args.out.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        print(f"{ex.id}: {len(row['nodes'])} nodes, " + ", ".join(
            f"{v} kept {sum(row['verdicts'][v])}" for v in variants), file=sys.stderr)
    atomic_write_text(md_path, render(load_rows(args.out), meta))
    print(md_path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
