"""Per signature: first-try parse rate, truncation rate and reply length, from stored rows
(no LM call).

Issue 45 asks that every signature of Diva, ToC and VerDICt parse on the first try in >= 95%
of calls and be truncated in <= 2%, with output caps set from the observed reply lengths. Every
stored evaluation row carries its trace's ``cost.by_signature``: LM calls, output tokens,
replies cut at the cap (``truncated``) and failed ChatAdapter parses (``parse_failures``; each
one makes DSPy call again, so first-try calls = calls - parse failures). Rows written after
2026-11-27 also carry ``max_output_tokens``, the longest single reply; older rows give the
per-call mean of each question, exact when the signature was called once.

Per run and signature this prints the calls, the first-try parse rate and the truncation rate
(each with its Wilson 95% interval and the target read from the interval: met, missed, or
undecided at n), the reply length per call (median, 90th percentile, longest) and the output
cap (the signature's ``output_cap_tokens``; Diva also caps every call at its paper decoding's
``max_tokens``).

    python -m benchmarks.signature_budget                 # the default runs below
    python -m benchmarks.signature_budget RUN_DIR [...]   # any run directories

Writes ``benchmarks/results/signature-budget/signature_budget.md`` and ``.json`` (temp file
+ rename).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.compile_targets import wilson  # one Wilson interval for every benchmark
from benchmarks.error_analysis import repeats_a_sentence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT = RESULTS / "signature-budget" / "signature_budget"
COMMAND = "python -m benchmarks.signature_budget"
#: zero-shot runs of the three ambiguity programs (and vanilla_rag, which shares the writer),
#: the oldest first; compile-v4 holds today's Diva, compile-v5 / compile-dr today's ToC (zero-shot
#: and DR-compiled, full runs at n = 60)
DEFAULT_RUNS = ("evidence/asqa/diva", "evidence/asqa/vanilla_rag", "evidence/asqa/toc",
                "evidence/asqa/verdict", "compile-v3/runs/diva-bootstrap-dr-signal",
                "compile-v4/runs/diva-zeroshot", "compile-v4/runs/diva-signal-inner-writer0",
                "compile-v5/runs/toc-zeroshot", "compile-dr/runs/toc-dr")
PARSE_TARGET = 0.95
TRUNCATION_TARGET = 0.02


def verdict(low: float, high: float, target: float, *, at_least: bool, n: int) -> str:
    """Met / missed only when the interval decides; otherwise undecided at n."""
    if at_least:
        return "met" if low >= target else "missed" if high < target else f"undecided at n = {n}"
    return "met" if high <= target else "missed" if low > target else f"undecided at n = {n}"


def output_cap(signature: str, program: str) -> int | None:
    """The cap a signature's replies run into: its ``output_cap_tokens``, and for Diva the
    smaller of that and the paper decoding's ``max_tokens`` (Diva sets it on every call)."""
    import importlib
    import pkgutil

    import ambiqa.signatures as sigs
    from ambiqa.programs.diva import PAPER_DECODING

    cap = None
    for info in pkgutil.iter_modules(sigs.__path__):
        cls = getattr(importlib.import_module(f"{sigs.__name__}.{info.name}"), signature, None)
        if cls is not None:
            cap = getattr(cls, "output_cap_tokens", None)
            break
    if cap is not None and program == "diva":
        cap = min(int(cap), int(PAPER_DECODING["max_tokens"]))
    return cap


def read_rows(run: Path) -> list[dict[str, Any]]:
    rows = []
    with (run / "results.jsonl").open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    return rows


def program_of(run: Path) -> str:
    """The registry name a run's run.json records (a compiled artifact: its program)."""
    meta = json.loads((run / "run.json").read_text(encoding="utf-8"))
    name = str(meta.get("program") or "")
    for known in ("vanilla_rag", "diva", "toc", "verdict", "resp", "eor", "closed_book"):
        if known in Path(name).name:
            return known
    return name


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def table_run(rows: list[dict[str, Any]], program: str) -> list[dict[str, Any]]:
    """One entry per signature of one run."""
    agg: dict[str, dict[str, Any]] = {}
    for r in rows:
        for sig, s in ((r.get("cost") or {}).get("by_signature") or {}).items():
            a = agg.setdefault(sig, {"calls": 0, "parse_failures": 0, "truncated": 0,
                                     "per_call": [], "longest": 0, "exact_longest": False})
            calls = int(s.get("calls") or 0)
            a["calls"] += calls
            a["parse_failures"] += int(s.get("parse_failures") or 0)
            a["truncated"] += int(s.get("truncated") or 0)
            if calls:
                mean = s.get("output_tokens", 0) / calls
                a["per_call"].append(mean)
                longest = s.get("max_output_tokens")
                value = longest if longest is not None else mean
                if value >= a["longest"]:  # exact when measured, or the only call of a question
                    a["exact_longest"] = longest is not None or calls == 1
                a["longest"] = max(a["longest"], value)
    out = []
    for sig, a in sorted(agg.items()):
        first = a["calls"] - a["parse_failures"]  # calls made on a first try
        ok_first = first - a["parse_failures"]
        p_lo, p_hi = wilson(ok_first, first)
        t_lo, t_hi = wilson(a["truncated"], a["calls"])
        out.append({
            "signature": sig, "calls": a["calls"], "first_try_calls": first,
            "first_try_parse": ok_first / first if first else None,
            "first_try_parse_ci": [p_lo, p_hi],
            "parse_target": verdict(p_lo, p_hi, PARSE_TARGET, at_least=True, n=first),
            "truncated": a["truncated"],
            "truncated_share": a["truncated"] / a["calls"] if a["calls"] else None,
            "truncated_ci": [t_lo, t_hi],
            "truncation_target": verdict(t_lo, t_hi, TRUNCATION_TARGET, at_least=False,
                                         n=a["calls"]),
            "output_p50": _quantile(a["per_call"], 0.5),
            "output_p90": _quantile(a["per_call"], 0.9),
            "output_longest": a["longest"], "longest_exact": a["exact_longest"],
            "cap": output_cap(sig, program),
        })
    return out


def render(report: dict[str, Any]) -> str:
    lines = ["# Per-signature parse, truncation and reply length (stored rows)", "",
             f"`{COMMAND}` -- no LM call. First-try parse: share of first-try calls whose reply "
             "parsed (target >= 95%); truncated: share of calls cut at the cap (target <= 2%); "
             "both with Wilson 95% intervals, a target read as met or missed only when the "
             "interval decides. Reply tokens per call: median and 90th percentile over "
             "questions of the per-question mean, and the longest reply (`~` where the rows "
             "predate `max_output_tokens` and the signature ran several times per question: a "
             "per-question mean, a lower bound).", ""]
    for run in report["runs"]:
        lines += [f"## {run['run']} ({run['program']}, {run['questions']} questions)", "",
                  "| signature | calls | first-try parse [95% CI] | target | truncated [95% CI] "
                  "| target | reply tok p50 / p90 / longest | cap (today's code) |",
                  "|---|---:|---|---|---|---|---|---:|"]
        for e in run["signatures"]:
            parse = ("–" if e["first_try_parse"] is None else
                     f"{e['first_try_parse']:.0%} [{e['first_try_parse_ci'][0]:.0%}, "
                     f"{e['first_try_parse_ci'][1]:.0%}]")
            trunc = (f"{e['truncated']} ({e['truncated_share']:.0%}) "
                     f"[{e['truncated_ci'][0]:.0%}, {e['truncated_ci'][1]:.0%}]")
            longest = ("" if e["longest_exact"] else "~") + f"{e['output_longest']:.0f}"
            lines.append(f"| {e['signature']} | {e['calls']} | {parse} | {e['parse_target']} | "
                         f"{trunc} | {e['truncation_target']} | {e['output_p50']:.0f} / "
                         f"{e['output_p90']:.0f} / {longest} | {e['cap'] or '–'} |")
        if run.get("looping") is not None:
            lines += ["", f"Long answers caught in a repetition loop (one sentence of 3+ words "
                          f"said twice, `error_analysis.repeats_a_sentence`): {run['looping']} "
                          f"of {run['questions']}."]
        lines.append("")
    return "\n".join(lines)


def build(runs: list[Path]) -> dict[str, Any]:
    out = []
    for run in runs:
        rows = read_rows(run)
        program = program_of(run)
        out.append({"run": str(run.relative_to(RESULTS)) if run.is_relative_to(RESULTS)
                    else str(run), "program": program, "questions": len(rows),
                    "signatures": table_run(rows, program),
                    "looping": sum(repeats_a_sentence(
                        str((r.get("prediction") or {}).get("answer") or "")) for r in rows)})
    return {"command": COMMAND, "runs": out}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", help="run directories (default: the stored zero-shot "
                    "runs of diva, vanilla_rag, toc and verdict, and compile-v3/v4's Diva)")
    ap.add_argument("--out", type=Path, default=OUT, help="output path without suffix")
    args = ap.parse_args(argv)
    runs = [Path(r) for r in args.runs] or [RESULTS / r for r in DEFAULT_RUNS]
    missing = [str(r) for r in runs if not (r / "results.jsonl").is_file()]
    if missing:
        print(f"no results.jsonl in: {', '.join(missing)}", file=sys.stderr)
        return 2
    report = build([r.resolve() for r in runs])
    _write(args.out.with_suffix(".json"), json.dumps(report, indent=1) + "\n")
    _write(args.out.with_suffix(".md"), render(report))
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
