"""The LM reader on the reader yardstick: D-F1 of the ASQA dev reference long answers read by
an LM (``--reader lm``: the LM copies each disambiguated question's short answer out of the long
answer), with its cost -- LM calls, tokens and seconds per question -- beside the extractive
readers of ``benchmarks/reader_v3.py`` (issue 34), and paired against the extractive reader
``--against`` (default: the default D-F1 reader) on the same questions, which costs no LM call.

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
    ap.add_argument("--against", default="extractive",
                    help="extractive reader read on the same questions (a spec or a checkpoint "
                         "directory; default: the default D-F1 reader; 'none': skip)")
    args = ap.parse_args(argv)
    import ambiqa
    from ambiqa.data.specs import load_dataset
    from ambiqa.errors import ModelError
    from ambiqa.evaluation.metrics import token_f1
    from ambiqa.evaluation.reader import LMReader, make_reader
    from ambiqa.evaluation.stats import metric_interval, paired_interval
    from ambiqa.lm import configure
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
    dev = load_dataset("asqa:dev")[:args.n]
    todo = [ex for ex in dev if str(ex.id) not in done]
    lm = ambiqa.make_lm(args.lm) if todo else None  # a finished run loads no model
    if lm is not None:
        configure(lm)  # ambiqa's tracing records every call's tokens
    reader = LMReader(lm) if lm is not None else None
    for ex in todo:
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
    # the extractive reader on the same questions and long answers (no LM call)
    against: dict[str, Any] | None = None
    if args.against != "none":
        try:
            other = make_reader(args.against)
        except ModelError as exc:  # not built on this machine: the LM rows still count
            print(f"no paired comparison: {exc}", file=sys.stderr)
            against = {"reader": args.against, "skipped": str(exc)}
        else:
            by_id = {str(ex.id): ex for ex in dev}
            other_vals = [d_f1_of(other, by_id[r["id"]], token_f1) for r in rows]
            plo, phi, _ = paired_interval("d-f1", [vals], [other_vals])
            against = {"reader": getattr(other, "name", args.against),
                       "d_f1_same_questions": round(statistics.fmean(other_vals), 4),
                       "paired_diff": round(statistics.fmean(vals)
                                            - statistics.fmean(other_vals), 4),
                       "ci95": [round(plo, 4), round(phi, 4)]}
    answerable = [rd for r in rows for rd in r["reads"]]
    res: dict[str, Any] = {
        "reader": reader.name if reader is not None else _stored_name(out, args.lm),
        "n": len(rows),
        "d_f1": {"n": len(vals), "mean": round(statistics.fmean(vals), 4),
                 "ci95": [round(lo, 4), round(hi, 4)]},
        "against": against,
        "abstained_answerable": round(sum(not rd["pred"] for rd in answerable)
                                      / max(1, len(answerable)), 4),
        "ms_per_question": round(1000 * statistics.fmean(r["s"] for r in rows), 1),
        "lm_calls_per_question": round(statistics.fmean(r["lm_calls"] for r in rows), 2),
        # None: rows read before the LM was configured with ambiqa's tracing recorded none
        "input_tokens_per_question": _mean_tokens(rows, "input_tokens"),
        "output_tokens_per_question": _mean_tokens(rows, "output_tokens"),
        "command": "python -m benchmarks.reader_lm_ceiling " + " ".join(
            sys.argv[1:] if argv is None else argv),
    }
    atomic_write_json(out.with_suffix(".json"), res)
    print(json.dumps(res, indent=1))
    return 0


def _mean_tokens(rows: list[dict[str, Any]], key: str) -> int | None:
    if not any(r.get(key) for r in rows):
        return None
    return round(statistics.fmean(r.get(key) or 0 for r in rows))


def _stored_name(out: Path, spec: str) -> str:
    """The LM reader's name when every row was read earlier (no model loaded this time)."""
    stored = out.with_suffix(".json")
    if stored.is_file():
        return str(json.loads(stored.read_text()).get("reader") or f"lm-reader:{spec}")
    return f"lm-reader:{spec}"


def d_f1_of(reader: Any, ex: Any, token_f1: Any) -> float:
    """D-F1 of one question's reference long answers: per long answer the mean token F1 of
    the reader's answer to each disambiguated question, averaged over the long answers."""
    per_ref = [statistics.fmean(token_f1(reader.answer(str(pair["question"]), str(la)),
                                         pair["short_answers"]) for pair in ex.qa_pairs)
               for la in ex.long_answers or []]
    return statistics.fmean(per_ref) if per_ref else 0.0


if __name__ == "__main__":
    sys.exit(main())
