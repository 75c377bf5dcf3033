"""Re-score every stored ASQA evidence run with another D-F1 reader, no LM call (issue 34).

Reads each ``results.jsonl`` under ``benchmarks/results/evidence/asqa*/``, re-reads every
row's stored long answer (``prediction.answer``) against the ASQA dev ``qa_pairs`` with the
given extractive reader, and writes, without touching the old files:

* ``benchmarks/results/evidence-rescored/<group>/<run>/results.jsonl`` -- the rows with
  ``metrics['d-f1']`` and ``metrics['dr_q']`` from the new reader, the old values kept beside
  them as ``d-f1 (old)`` / ``dr_q (old)`` (the reader each came from is in ``rescored.json``),
  without the retrieved passages (the source run holds them; nothing here reads them);
* ``benchmarks/results/evidence-rescored/rescored.{json,md}`` -- per run the old and new D-F1
  and DR (set-level, as the ASQA scorer defines DR) with 95% BCa intervals, and for every paired
  comparison the evidence tables draw (each program against closed_book, the pairs the plan
  names, compiled against zero-shot and against the other program compiled the same way) the
  old and new paired differences, and whether the conclusion changes (an interval that excluded
  0 no longer does, or the other way round, or the sign flips).

Paired intervals come from :func:`ambiqa.evaluation.stats.paired_comparison` (the machinery of
``ambiqa compare`` and the evidence tables), failed rows scoring 0.

    python -m benchmarks.reader_rescore --reader ~/.cache/ambiqa/readers/minilm-asqa-v3
    python -m benchmarks.reader_rescore --report-only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from ambiqa.fsutil import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parents[1]

EVIDENCE = ROOT / "benchmarks/results/evidence"
OUT = ROOT / "benchmarks/results/evidence-rescored"
GROUPS = ("asqa", "asqa-compiled")
METRICS = ("d-f1", "dr")

#: zero-shot pairs the evidence tables draw (program, reference), beyond "vs closed_book"
ZERO_SHOT_PAIRS = (("diva", "vanilla_rag"), ("verdict", "vanilla_rag"), ("toc-strict", "toc"),
                   ("diva-skip-none", "diva"))


def run_pairs(runs: list[str]) -> list[tuple[str, str]]:
    """Every (program, reference) pair the evidence tables compare, among ``runs``
    (``group/name``)."""
    names = {r.split("/", 1)[1]: r for r in runs}
    pairs: list[tuple[str, str]] = []

    def add(a: str, b: str) -> None:
        if a in names and b in names and a != b:
            pairs.append((names[a], names[b]))

    zero = [r.split("/", 1)[1] for r in runs if r.startswith("asqa/")]
    for name in zero:
        add(name, "closed_book")
    for a, b in ZERO_SHOT_PAIRS:
        add(a, b)
    for r in runs:
        if not r.startswith("asqa-compiled/"):
            continue
        name = r.split("/", 1)[1]
        program, _, tele = name.partition("-")
        base = {"toc": "toc", "diva": "diva", "vanilla_rag": "vanilla_rag",
                "verdict": "verdict"}.get(program)
        if base:
            add(name, base)  # compiled vs its own zero-shot
        add(name, "closed_book")
        if program in ("diva", "verdict"):
            add(name, "vanilla_rag")
            add(name, f"vanilla_rag-{tele}")
    return pairs


def rescore_rows(rows: list[dict[str, Any]], dev_by_id: dict[str, Any], reader: Any,
                 memo: dict[str, float]) -> list[dict[str, Any]]:
    """The rows with D-F1 (and the per-question DR root) from ``reader``; old values kept."""
    from ambiqa.evaluation.metrics import disambig_f1, dr_score

    out = []
    for row in rows:
        row = json.loads(json.dumps(row))
        metrics = row.get("metrics") or {}
        ex = dev_by_id.get(str(row.get("id")))
        pred = row.get("prediction") or {}
        if row.get("error") or ex is None or "d-f1" not in metrics:
            out.append(row)
            continue
        answer = str(pred.get("answer") or "")
        key = hashlib.sha256(f"{row['id']}\n{answer}".encode()).hexdigest()
        if key not in memo:
            memo[key] = disambig_f1(answer, list(ex.qa_pairs), reader)
        new = memo[key]
        metrics["d-f1 (old)"] = metrics["d-f1"]
        metrics["d-f1"] = new
        if "dr_q" in metrics and "rouge-l" in metrics:
            metrics["dr_q (old)"] = metrics["dr_q"]
            metrics["dr_q"] = dr_score(new, float(metrics["rouge-l"]))
        row["metrics"] = metrics
        out.append(row)
    return out


def _old_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rescored rows with the old D-F1 put back (for old-vs-new on identical rows)."""
    out = []
    for row in rows:
        m = dict(row.get("metrics") or {})
        if "d-f1 (old)" in m:
            m["d-f1"] = m["d-f1 (old)"]
        if "dr_q (old)" in m:
            m["dr_q"] = m["dr_q (old)"]
        out.append({**row, "metrics": m})
    return out


def _rel(path: Path) -> str:
    """``path`` relative to the checkout when inside it (commands quoted in reports)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _r(x: Any) -> Any:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, 4)


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    from ambiqa.evaluation.stats import paired_comparison, summarize_metric

    per_run = {}
    for name, rows in runs.items():
        per_run[name] = {"n": len(rows)}
        for metric in METRICS:
            old = summarize_metric(_old_rows(rows), metric)
            new = summarize_metric(rows, metric)
            per_run[name][metric] = {
                "old": {"mean": _r(old["mean"]), "ci95": [_r(v) for v in old["ci95"]]},
                "new": {"mean": _r(new["mean"]), "ci95": [_r(v) for v in new["ci95"]]}}
    pairs = []
    for a, b in run_pairs(sorted(runs)):
        rec: dict[str, Any] = {"program": a, "reference": b}
        changed = []
        for metric in METRICS:
            old = paired_comparison(_old_rows(runs[b]), _old_rows(runs[a]), metric)
            new = paired_comparison(runs[b], runs[a], metric)
            rec["n_shared"] = new["n_shared"]
            rec[metric] = {side: {"diff": _r(c["diff"]), "ci95": [_r(v) for v in c["ci95"]],
                                  "excludes_zero": c["excludes_zero"]}
                           for side, c in (("old", old), ("new", new))}
            if old["excludes_zero"] != new["excludes_zero"]:
                changed.append(f"{metric}: interval "
                               f"{'no longer excludes' if old['excludes_zero'] else 'now excludes'}"
                               " 0")
            elif (old["excludes_zero"] and new["excludes_zero"]
                  and (old["diff"] > 0) != (new["diff"] > 0)):
                changed.append(f"{metric}: sign flips")
        rec["changed"] = changed
        pairs.append(rec)
    return {"runs": per_run, "pairs": pairs}


def _cell(c: dict[str, Any]) -> str:
    lo, hi = c["ci95"]
    star = " *" if c.get("excludes_zero") else ""
    if lo is None:
        return f"{c.get('diff', c.get('mean')):+.3f}{star}"
    val = c.get("diff", c.get("mean"))
    sign = "+" if "diff" in c else ""
    return f"{val:{sign}.3f}{star} [{lo:.3f}, {hi:.3f}]"


def render(res: dict[str, Any]) -> str:
    lines = [
        "# Stored ASQA evidence runs re-scored with a new D-F1 reader (no LM call)",
        "",
        f"Old reader: `{res['old_reader']}`; new reader: `{res['new_reader']}` (both STAND-INs "
        "for the ASQA paper's RoBERTa-large SQuAD 2.0 reader). Each row's stored long answer "
        "was re-read; STR-EM, ROUGE-L and retrieval scores are unchanged. DR = sqrt(mean D-F1 "
        "× mean ROUGE-L) over the set. Failed rows score 0. 95% BCa bootstrap intervals; "
        "paired on the questions both runs hold; * = the interval excludes 0.",
        "",
        f"Command: `{res['command']}` ({res['reads']} reads, {res['read_s']} s).",
        "",
        "## Per run",
        "",
        "| run | n | D-F1 old | D-F1 new | DR old | DR new |",
        "|---|---:|---|---|---|---|",
    ]
    for name, r in res["runs"].items():
        lines.append(f"| {name} | {r['n']} | {_cell(r['d-f1']['old'])} | "
                     f"{_cell(r['d-f1']['new'])} | {_cell(r['dr']['old'])} | "
                     f"{_cell(r['dr']['new'])} |")
    lines += ["", "## Paired comparisons (program − reference)", "",
              "| program | reference | n | Δ D-F1 old | Δ D-F1 new | Δ DR old | Δ DR new | "
              "conclusion changes |",
              "|---|---|---:|---|---|---|---|---|"]
    for p in res["pairs"]:
        lines.append(f"| {p['program']} | {p['reference']} | {p['n_shared']} | "
                     f"{_cell(p['d-f1']['old'])} | {_cell(p['d-f1']['new'])} | "
                     f"{_cell(p['dr']['old'])} | {_cell(p['dr']['new'])} | "
                     f"{'; '.join(p['changed']) or '–'} |")
    n_changed = sum(1 for p in res["pairs"] if p["changed"])
    lines += ["", f"{n_changed} of {len(res['pairs'])} paired conclusions change.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reader", default=None, help="extractive reader checkpoint directory")
    ap.add_argument("--root", default=str(EVIDENCE))
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.report_only:
        res = json.loads((out / "rescored.json").read_text())
        atomic_write_text(out / "rescored.md", render(res))
        return 0
    if not args.reader:
        ap.error("--reader DIR is needed (or --report-only)")
    from ambiqa.data.specs import load_dataset
    from ambiqa.evaluation.extractive import ExtractiveReader
    from ambiqa.evaluation.reader import reader_identity
    from ambiqa.tracing import track
    from benchmarks.add_d_f1 import SLIM_NOTE, slim

    reader = ExtractiveReader(Path(args.reader).expanduser(), threads=args.threads)
    dev_by_id = {str(e.id): e for e in load_dataset("asqa:dev")}
    root = Path(args.root)
    runs: dict[str, list[dict[str, Any]]] = {}
    old_readers = set()
    memo: dict[str, float] = {}
    t0 = time.perf_counter()
    with track() as trace:
        for group in GROUPS:
            for run_dir in sorted(p for p in (root / group).glob("*")
                                  if (p / "results.jsonl").is_file()):
                meta = json.loads((run_dir / "run.json").read_text()) if (
                    run_dir / "run.json").is_file() else {}
                old_readers.add(str(meta.get("reader")))
                rows = [json.loads(line) for line in
                        (run_dir / "results.jsonl").read_text().splitlines() if line.strip()]
                new_rows = rescore_rows(rows, dev_by_id, reader, memo)
                name = f"{group}/{run_dir.name}"
                runs[name] = new_rows
                dest = out / group / run_dir.name
                dest.mkdir(parents=True, exist_ok=True)
                atomic_write_text(dest / "results.jsonl",
                                  "".join(json.dumps(slim(r)) + "\n" for r in new_rows))
                atomic_write_json(dest / "run.json", {
                    **meta, "reader": reader.name, "old_reader": meta.get("reader"),
                    "reader_identity": reader_identity(reader), "rows": SLIM_NOTE})
                print(f"{name}: {len(new_rows)} rows", flush=True)
    if trace.lm_calls:
        raise SystemExit(f"re-scoring made {trace.lm_calls} LM calls; it must make none")
    res = {"old_reader": ", ".join(sorted(old_readers)), "new_reader": reader.name,
           "new_reader_weights_sha256": (reader.manifest.get("weights") or {}).get("sha256"),
           "null_threshold": reader.null_threshold, "reads": len(memo),
           "read_s": round(time.perf_counter() - t0, 1), "lm_calls": 0,
           "command": "python -m benchmarks.reader_rescore --reader "
                      f"$AMBIQA_CACHE/readers/{reader.path.name}"
                      + ("" if root.resolve() == EVIDENCE else f" --root {_rel(root)}")
                      + ("" if out.resolve() == OUT else f" --out {_rel(out)}"),
           **summarize(runs)}
    atomic_write_json(out / "rescored.json", res)
    atomic_write_text(out / "rescored.md", render(res))
    print(render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
