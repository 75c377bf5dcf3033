"""The LM reader on the reader yardstick: D-F1 of the ASQA dev reference long answers read by
an LM (``--reader lm``: the LM copies each disambiguated question's short answer out of the long
answer), with its cost -- LM calls, tokens and seconds per question -- beside the extractive
readers of ``benchmarks/reader_v3.py`` (issue 34).

Resumable: every question's reads are appended to ``<out>.rows.jsonl`` as they finish, and a
rerun skips the questions already there. The result JSON is what ``benchmarks.reader_v3
--lm-reader`` shows beside the extractive readers.

    python -m benchmarks.reader_lm_ceiling --lm embedded --n 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ambiqa.fsutil import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks/results/reader-v3/lm-reader"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lm", default="embedded", help="LM spec (default: the embedded 1.5B)")
    ap.add_argument("--n", type=int, default=10, help="first N ASQA dev questions")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    import ambiqa
    from ambiqa.data.specs import load_dataset
    from ambiqa.evaluation.metrics import token_f1
    from ambiqa.evaluation.reader import LMReader
    from ambiqa.evaluation.stats import metric_interval
    from ambiqa.tracing import track

    out = Path(args.out)
    rows_path = out.with_suffix(".rows.jsonl")
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    done = {}
    if rows_path.is_file():
        for line in rows_path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done[r["id"]] = r
    lm = ambiqa.make_lm(args.lm)
    reader = LMReader(lm)
    dev = load_dataset("asqa:dev")[:args.n]
    for ex in dev:
        if str(ex.id) in done:
            continue
        t0 = time.perf_counter()
        per_ref, reads = [], []
        history0 = len(getattr(lm, "history", None) or [])
        with track() as trace:
            for la in ex.long_answers or []:
                f1s = []
                for pair in ex.qa_pairs:
                    pred = reader.answer(str(pair["question"]), str(la))
                    f1s.append(token_f1(pred, pair["short_answers"]))
                    reads.append({"question": pair["question"], "pred": pred,
                                  "gold": pair["short_answers"], "f1": f1s[-1]})
                per_ref.append(statistics.fmean(f1s))
        row = {"id": str(ex.id), "d_f1": statistics.fmean(per_ref), "reads": reads,
               # ambiqa's own LMs record every call in the trace; any dspy.LM in its history
               "s": round(time.perf_counter() - t0, 1),
               "lm_calls": max(trace.lm_calls,
                               len(getattr(lm, "history", None) or []) - history0),
               "input_tokens": trace.input_tokens, "output_tokens": trace.output_tokens}
        with rows_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        done[row["id"]] = row
        print(f"{row['id']}: D-F1 {row['d_f1']:.3f}, {row['lm_calls']} calls, {row['s']} s",
              flush=True)
    rows = [done[str(ex.id)] for ex in dev if str(ex.id) in done]
    vals = [r["d_f1"] for r in rows]
    lo, hi, _ = metric_interval("d-f1", [vals])
    answerable = [rd for r in rows for rd in r["reads"]]
    res: dict[str, Any] = {
        "reader": reader.name, "n": len(rows),
        "d_f1": {"n": len(vals), "mean": round(statistics.fmean(vals), 4),
                 "ci95": [round(lo, 4), round(hi, 4)]},
        "abstained_answerable": round(sum(not rd["pred"] for rd in answerable)
                                      / max(1, len(answerable)), 4),
        "ms_per_question": round(1000 * statistics.fmean(r["s"] for r in rows), 1),
        "lm_calls_per_question": round(statistics.fmean(r["lm_calls"] for r in rows), 2),
        "input_tokens_per_question": round(statistics.fmean(r["input_tokens"] for r in rows)),
        "output_tokens_per_question": round(statistics.fmean(r["output_tokens"]
                                                             for r in rows)),
        "command": "python -m benchmarks.reader_lm_ceiling " + " ".join(
            sys.argv[1:] if argv is None else argv),
    }
    atomic_write_json(out.with_suffix(".json"), res)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
