"""Is a rebuilt D-F1 reader the reader that scored the stored rows?

The default reader (``extractive:minilm-asqa-v4``) ships with ambiqa and is installed with
the same weights sha256 everywhere; older readers live in ``$AMBIQA_CACHE`` and a new machine
rebuilds them with the recipe in BENCHMARKS.md (``ambiqa reader train ... --stop-at-step N``).
Reading can still differ between machines (floating-point order on another CPU), so before a
run resumes rows scored by a reader, this script re-scores every stored ASQA row that reader
read with the reader on this machine and checks that each row's D-F1 comes out the same.
Only runs whose ``run.json`` names the same reader are checked; a difference fails the
script (exit 1), so it can stand before a ``--resume`` in a run queue.

    python -m benchmarks.reader_rebuild            # shipped reader, its re-scored rows
    python -m benchmarks.reader_rebuild --reader ~/.cache/ambiqa/readers/minilm-asqa-v2

Output: ``benchmarks/results/evidence/reader-rebuild.json``.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from ambiqa.fsutil import atomic_write_json  # noqa: E402
from benchmarks.reader import program_runs  # noqa: E402

EVIDENCE = ROOT / "benchmarks/results/evidence"
#: the stored ASQA rows read by the shipped reader (benchmarks/reader_rescore.py)
RESCORED_V4 = ROOT / "benchmarks/results/evidence-rescored-v4"
TOLERANCE = 1e-9


def check(reader: Any, roots: list[Path], dev_by_id: dict[str, Any]) -> dict[str, Any]:
    """Per run: rows re-scored, rows whose D-F1 is unchanged, the largest change."""
    runs = []
    for root in roots:
        for run in program_runs(reader, root, dev_by_id):
            if run["lm_reader"] != reader.name:
                continue  # scored by another reader: nothing to reproduce
            # program_runs keeps the row's stored D-F1 under "lm" (it was first written to
            # compare the extractive reader with the LM stand-in) and the re-score under
            # "extractive"
            diffs = [abs(r["extractive"] - r["lm"]) for r in run["rows"] if r["lm"] is not None]
            runs.append({"run": run["dir"], "rows": len(diffs),
                         "identical": sum(d <= TOLERANCE for d in diffs),
                         "max_abs_diff": round(max(diffs, default=0.0), 6)})
    return {"runs": runs, "rows": sum(r["rows"] for r in runs),
            "identical": sum(r["identical"] for r in runs)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reader", default=None, help="reader checkpoint (default: the cache's)")
    p.add_argument("--roots", nargs="+", default=[str(RESCORED_V4 / "asqa"),
                                                  str(RESCORED_V4 / "asqa-compiled")])
    p.add_argument("--out", default=str(EVIDENCE / "reader-rebuild.json"))
    args = p.parse_args(argv)

    from ambiqa.data.specs import load_dataset
    from ambiqa.evaluation.extractive import ExtractiveReader, default_reader_dir
    from ambiqa.evaluation.shipped_reader import ensure_installed

    path = Path(args.reader).expanduser() if args.reader else default_reader_dir()
    ensure_installed(path)  # the shipped reader, installed from the package when missing
    reader = ExtractiveReader(path)
    t0 = time.perf_counter()
    result = check(reader, [Path(r) for r in args.roots],
                   {str(e.id): e for e in load_dataset("asqa:dev")})
    result = {"reader": reader.name, "weights_sha256": reader.manifest["weights"]["sha256"],
              "train_command": reader.manifest.get("command"), "machine": platform.processor()
              or platform.machine(), "seconds": round(time.perf_counter() - t0, 1),
              "command": "python -m benchmarks.reader_rebuild", **result}
    atomic_write_json(Path(args.out), result)
    same = result["rows"] == result["identical"]
    print(f"{reader.name} (weights {result['weights_sha256'][:16]}…): {result['identical']} of "
          f"{result['rows']} stored rows re-scored to the same D-F1"
          + ("" if same else " — NOT the reader that scored them"))
    return 0 if same and result["rows"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
