"""Add D-F1 and DR to stored ASQA runs that were scored without a reader (no LM call).

Runs made while no extractive reader was on the machine (compile-v4/v5, the loop guard, the
step replays: issues 45 and 46) hold STR-EM and ROUGE-L only. Their long answers are stored
in the rows, so D-F1 can be read afterwards with the shipped reader
(``extractive:minilm-asqa-v4``, a STAND-IN for the ASQA paper's RoBERTa-large SQuAD 2.0
reader) -- the same reader every new ``ambiqa evaluate`` uses -- without touching the LM.

For each run directory given, a copy goes to ``OUT/<path below benchmarks/results>/`` with
every answered row's ``metrics`` gaining ``d-f1`` and ``dr_q`` (sqrt(D-F1 x ROUGE-L), for
plots) and losing its retrieved passages (nothing downstream reads them; the source run keeps
them), and ``run.json`` gaining ``d-f1``/``dr`` in its metrics and the reader's identity
(name and weights sha256). The source rows are never modified. ``ambiqa compare`` then draws
paired D-F1 and DR on the copies like on any run. Questions are looked up by id in ASQA dev
and train (held-out validation rows come from the training split).

    python -m benchmarks.add_d_f1 benchmarks/results/loop-guard/runs/on \\
        benchmarks/results/step-replay/runs/brief
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ambiqa.fsutil import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks/results"
OUT = RESULTS / "dr-v4"


#: what a copy leaves out of each row: the retrieved passages are ~60% of a Diva row, no D-F1,
#: DR, comparison or table reads them, and the source run keeps them
SLIM_NOTE = "prediction.passages left out of this copy; the source run holds them"


def slim(row: dict[str, Any]) -> dict[str, Any]:
    """The row without its retrieved passages (see :data:`SLIM_NOTE`)."""
    pred = row.get("prediction")
    if isinstance(pred, dict) and "passages" in pred:
        row = {**row, "prediction": {k: v for k, v in pred.items() if k != "passages"}}
    return row


def score_rows(rows: list[dict[str, Any]], questions: dict[str, Any], reader: Any
               ) -> tuple[list[dict[str, Any]], int]:
    """The rows with ``d-f1`` and ``dr_q`` added (failed or unknown rows left as they are);
    returns them and the number of reads."""
    from ambiqa.evaluation.metrics import disambig_f1, dr_score

    out, reads = [], 0
    for row in rows:
        row = json.loads(json.dumps(row))
        ex = questions.get(str(row.get("id")))
        metrics = row.get("metrics") or {}
        if row.get("error") or ex is None or "rouge-l" not in metrics:
            out.append(row)
            continue
        answer = str((row.get("prediction") or {}).get("answer") or "")
        d = disambig_f1(answer, list(ex.qa_pairs), reader)
        reads += 1
        metrics["d-f1"] = d
        metrics["dr_q"] = dr_score(d, float(metrics["rouge-l"]))
        row["metrics"] = metrics
        out.append(row)
    return out, reads


def relative(run: Path) -> Path:
    """Where a run's copy goes below OUT: its path below benchmarks/results."""
    try:
        return run.resolve().relative_to(RESULTS)
    except ValueError:
        return Path(run.name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories (results.jsonl)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--reader", default=None,
                    help="reader checkpoint directory (default: the shipped reader)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    missing = [str(r) for r in args.runs if not (r / "results.jsonl").is_file()]
    if missing:
        ap.error(f"no results.jsonl in: {', '.join(missing)}")
    from ambiqa.data.specs import load_dataset
    from ambiqa.evaluation.extractive import ExtractiveReader, default_reader_dir
    from ambiqa.evaluation.reader import reader_identity
    from ambiqa.evaluation.shipped_reader import ensure_installed
    from ambiqa.tracing import track

    path = Path(args.reader).expanduser() if args.reader else default_reader_dir()
    ensure_installed(path)  # the shipped reader, installed from the package when missing
    reader = ExtractiveReader(path, threads=args.threads)
    questions = {str(e.id): e for spec in ("asqa:train", "asqa:dev")
                 for e in load_dataset(spec)}
    with track() as trace:
        for run in args.runs:
            t0 = time.perf_counter()
            rows = [json.loads(line) for line in
                    (run / "results.jsonl").read_text(encoding="utf-8").splitlines()
                    if line.strip()]
            new_rows, reads = score_rows(rows, questions, reader)
            meta = json.loads((run / "run.json").read_text(encoding="utf-8")) \
                if (run / "run.json").is_file() else {}
            metrics = [m for m in meta.get("metrics") or ["str-em", "rouge-l"]
                       if m not in ("d-f1", "dr")] + ["d-f1", "dr"]
            dest = args.out / relative(run)
            dest.mkdir(parents=True, exist_ok=True)
            atomic_write_text(dest / "results.jsonl",
                              "".join(json.dumps(slim(r)) + "\n" for r in new_rows))
            atomic_write_json(dest / "run.json", {
                **meta, "metrics": metrics, "reader": reader.name,
                "reader_identity": reader_identity(reader),
                "d_f1_added_from": str(relative(run)),
                "d_f1_added_by": "python -m benchmarks.add_d_f1", "rows": SLIM_NOTE})
            print(f"{relative(run)}: {reads} of {len(rows)} rows read in "
                  f"{time.perf_counter() - t0:.0f} s -> {dest}", flush=True)
    if trace.lm_calls:
        raise SystemExit(f"adding D-F1 made {trace.lm_calls} LM calls; it must make none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
