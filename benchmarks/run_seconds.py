"""Seconds and tokens per question of two stored runs, paired on the same questions (issue 45).

``benchmarks.throughput`` times two settings in interleaved blocks in one process: the fair
clock. Two runs made one after the other by ``ambiqa evaluate`` on the same idle machine are
the next best thing, and free once they exist -- each row records its wall seconds, the
seconds its LM calls took and its tokens. This reads both runs, keeps the questions both hold
(``--rows A:B`` narrows to positions A..B-1 of the base run, e.g. the rows one session
added), and prints the ratio of mean seconds per question (new over old) with a paired 95%
BCa interval over questions, beside the tokens per question that explain it. Rows measured on
different days or beside other jobs are not comparable this way: pick the rows by when they
were made.

    python -m benchmarks.run_seconds benchmarks/results/compile-v5/runs/toc-zeroshot \\
        benchmarks/results/compile-dr/runs/toc-dr --rows 30:60 \\
        --out benchmarks/results/compile-dr/seconds-toc-dev.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.fsutil import atomic_write_text
from benchmarks.peers import _wall, mean_ratio, token_means


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``run_dir`` that answered (an errored row has no comparable cost)."""
    path = Path(run_dir) / "results.jsonl"
    if not path.is_file():
        raise ConfigError(f"{path}: no results.jsonl", hint="name a run directory")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return [r for r in rows if not r.get("error") and r.get("cost")]


def lm_seconds(row: dict[str, Any]) -> float:
    """Seconds the row's LM calls took (summed over calls; concurrent calls overlap)."""
    return float((row.get("cost") or {}).get("lm_latency_s") or 0.0)


def compare(old_dir: Path, new_dir: Path, rows: tuple[int, int] | None = None
            ) -> dict[str, Any]:
    """Seconds and tokens per question of ``new_dir`` against ``old_dir`` on shared questions."""
    old_rows = read_rows(old_dir)
    if rows is not None:
        old_rows = old_rows[rows[0]:rows[1]]
    new_by_id = {str(r["id"]): r for r in read_rows(new_dir)}
    shared = [r for r in old_rows if str(r["id"]) in new_by_id]
    if not shared:
        raise ConfigError(f"{old_dir} and {new_dir} share no answered question"
                          + (f" in rows {rows[0]}:{rows[1]}" if rows else ""))
    paired_new = [new_by_id[str(r["id"])] for r in shared]
    out: dict[str, Any] = {"n": len(shared), "rows": list(rows) if rows else None}
    for name, fn in (("wall_s", _wall), ("lm_s", lm_seconds)):
        a, b = [fn(r) for r in shared], [fn(r) for r in paired_new]
        out[name] = {"old": sum(a) / len(a), "new": sum(b) / len(b), **mean_ratio(a, b)}
    out["tokens"] = {"old": token_means(shared), "new": token_means(paired_new)}
    return out


def render(result: dict[str, Any], old_name: str, new_name: str, command: str) -> str:
    n, t = result["n"], result["tokens"]
    span = (f", rows {result['rows'][0]}-{result['rows'][1] - 1} of the base run"
            if result["rows"] else "")
    lines = [f"# Seconds and tokens per question: {new_name} against {old_name}", "",
             f"`{command}` -- no LM call; {n} questions both runs answered{span}. Ratio: "
             "mean seconds per question, new over old, 95% paired BCa interval over questions.",
             "", f"| per question (n = {n}) | {old_name} | {new_name} | ratio new / old [95%] |",
             "|---|---:|---:|---|"]
    for key, label in (("wall_s", "wall seconds"), ("lm_s", "LM seconds (summed over calls)")):
        r = result[key]
        lo, hi = r["ci95"]
        lines.append(f"| {label} | {r['old']:.1f} | {r['new']:.1f} | "
                     f"{r['ratio']:.2f}× [{lo:.2f}, {hi:.2f}] |")
    for key, label in (("computed_tokens", "computed prompt tokens"),
                       ("cached_tokens", "cached prompt tokens"),
                       ("output_tokens", "output tokens"), ("lm_calls", "LM calls")):
        old, new = t["old"].get(key, float("nan")), t["new"].get(key, float("nan"))
        ratio = f"{new / old:.2f}×" if old else "–"
        lines.append(f"| {label} | {old:,.1f} | {new:,.1f} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path, help="the base run directory")
    ap.add_argument("new", type=Path, help="the run compared against it")
    ap.add_argument("--rows", default=None, metavar="A:B",
                    help="only the base run's rows A..B-1 (answered rows, file order)")
    ap.add_argument("--out", type=Path, default=None, help="write the table here (.md; "
                    "the figures beside it as .json)")
    args = ap.parse_args(argv)
    rows = None
    if args.rows:
        try:
            a, b = (int(x) for x in args.rows.split(":"))
        except ValueError:
            ap.error(f"--rows {args.rows!r}: expected A:B, two integers")
        if not 0 <= a < b:
            ap.error(f"--rows {args.rows!r}: expected 0 <= A < B")
        rows = (a, b)
    try:
        result = compare(args.old, args.new, rows)
    except ConfigError as exc:
        ap.exit(2, f"error: {exc}\n")
    command = "python -m benchmarks.run_seconds " + " ".join(
        [str(args.old), str(args.new)] + (["--rows", args.rows] if args.rows else [])
        + (["--out", str(args.out)] if args.out else []))
    text = render(result, args.old.name, args.new.name, command)
    if args.out:
        atomic_write_text(args.out, text)
        atomic_write_text(args.out.with_suffix(".json"), json.dumps(result, indent=2) + "\n")
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
