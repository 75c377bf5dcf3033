"""Which of VerDICt's extraction rules tell a useful candidate from a useless one?

VerDICt's per-passage step (Fig. 6) asks the LLM for a question-shaped interpretation and a
short answer taken from the passage. The error analysis of ASQA dev
(``benchmarks/results/evidence/asqa/error-analysis-verdict.md``) found the 1.5B breaking those
rules; ``VerDICt(candidate_check=True)`` drops candidates that visibly break one of
:data:`ambiqa.programs.verdict.CHECKED_RULES` before clustering. This script decides which
rules belong in that set, from a stored verdict run on **training** questions (issue 16: fixes
are chosen on train data), with no LM call:

* every candidate of every row (also those an earlier check rejected) is tested against each
  rule of :func:`ambiqa.programs.verdict.rule_violations`;
* a candidate is *useful* when its answer matches one of the question's gold short answers
  (SQuAD-normalised, one containing the other) -- a proxy: a useful candidate can still carry
  a poor interpretation;
* per rule: how many candidates break it and the useful share among them against the useful
  share among the candidates that do not, with a 95% percentile bootstrap interval of the
  difference over questions (candidates of one question resampled together).

The rule of choice, fixed before the train run was read: a rule is checked when that
interval lies wholly below 0 (its breakers are useful less often, beyond noise).

    python -m benchmarks.verdict_rules benchmarks/results/asqa-train-ab/verdict \\
        --out benchmarks/results/asqa-train-ab/verdict-rules
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from ambiqa.data import load_dataset  # noqa: E402
from ambiqa.errors import AmbiqaError  # noqa: E402
from ambiqa.evaluation.metrics import normalize_answer, short_answers_of  # noqa: E402
from ambiqa.evaluation.reports.report import load_run  # noqa: E402
from ambiqa.evaluation.stats import fmt_interval  # noqa: E402
from ambiqa.fsutil import atomic_write_json, atomic_write_text  # noqa: E402
from ambiqa.programs.verdict import CHECKED_RULES, RULES, rule_violations  # noqa: E402

RESAMPLES = 2000


def is_useful(answer: str, golds: list[str]) -> bool:
    """The candidate's answer and a gold short answer contain one another (normalised)."""
    a = normalize_answer(answer)
    return bool(a) and any(g and (g in a or a in g) for g in map(normalize_answer, golds))


def candidates_of(row: dict[str, Any], example: Any) -> list[dict[str, Any]]:
    """Each candidate of a stored row with the rules it breaks and whether it is useful."""
    pred = row.get("prediction") or {}
    texts = {p["id"]: p.get("text", "") for p in pred.get("passages", [])}
    golds = [a for qa in example.qa_pairs for a in short_answers_of(qa)]
    out = []
    for c in list(pred.get("candidates", [])) + list(pred.get("rejected", [])):
        broken = rule_violations(row["question"], c["question"], c["answer"],
                                 texts.get(c["passage"], ""))
        out.append({"broken": broken, "useful": is_useful(c["answer"], golds)})
    return out


def rule_table(per_question: list[list[dict[str, Any]]], seed: int = 0) -> list[dict[str, Any]]:
    """Per rule: breakers, useful share among them and among the rest, and the bootstrap
    interval over questions of the difference."""
    rng = np.random.default_rng(seed)
    n_q = len(per_question)
    rows = []
    for rule in RULES:
        # per question: useful and all counts among breakers (b) and the rest (k)
        counts = np.array([[sum(c["useful"] for c in cs if rule in c["broken"]),
                            sum(rule in c["broken"] for c in cs),
                            sum(c["useful"] for c in cs if rule not in c["broken"]),
                            sum(rule not in c["broken"] for c in cs)] for cs in per_question],
                          dtype=float).reshape(n_q, 4)
        tot = counts.sum(axis=0)
        b_rate = tot[0] / tot[1] if tot[1] else float("nan")
        k_rate = tot[2] / tot[3] if tot[3] else float("nan")
        diffs = []
        for _ in range(RESAMPLES):
            s = counts[rng.integers(0, n_q, n_q)].sum(axis=0)
            if s[1] and s[3]:
                diffs.append(s[0] / s[1] - s[2] / s[3])
        lo, hi = (np.percentile(diffs, [2.5, 97.5]).tolist() if len(diffs) > 1
                  else [float("nan")] * 2)
        rows.append({"rule": rule, "breakers": int(tot[1]), "others": int(tot[3]),
                     "useful_breakers": b_rate, "useful_others": k_rate,
                     "diff": b_rate - k_rate, "ci95": [lo, hi],
                     "check": bool(hi < 0), "checked_now": rule in CHECKED_RULES})
    return rows


def analyse(run_dir: Path) -> dict[str, Any]:
    run = load_run(run_dir)
    if run.spec.program != "verdict":
        raise AmbiqaError(f"{run_dir} is a {run.spec.program or 'unknown'} run, not verdict")
    split = run.spec.data.rsplit(":", 1)[0] if run.spec.data.count(":") >= 2 else run.spec.data
    examples = {str(e.id): e for e in load_dataset(split)}
    per_question = [candidates_of(r, examples[str(r["id"])]) for r in run.rows
                    if not r.get("error") and str(r["id"]) in examples]
    flat = [c for cs in per_question for c in cs]
    return {"run": str(run_dir), "data": run.spec.data, "questions": len(per_question),
            "candidates": len(flat), "useful": sum(c["useful"] for c in flat),
            "rules": rule_table(per_question)}


def render(result: dict[str, Any], command: str) -> str:
    lines = [f"# VerDICt's extraction rules on `{result['data']}`", "",
             f"`{command}`", "",
             f"{result['questions']} questions, {result['candidates']} candidates (every "
             f"non-abstaining passage read), {result['useful']} useful (the answer matches a "
             "gold short answer, normalised, one containing the other). Rules: "
             "`ambiqa.programs.verdict.rule_violations`; Δ = useful share among the breakers "
             "− among the others, 95% percentile bootstrap over questions. A rule is "
             "checked when the interval lies below 0.", "",
             "| rule | breakers | others | useful: breakers | useful: others | Δ [95% CI] "
             "| check? |", "|---|---:|---:|---:|---:|---|---|"]
    for r in result["rules"]:
        lines.append(f"| {r['rule']} | {r['breakers']} | {r['others']} | "
                     f"{r['useful_breakers']:.2f} | {r['useful_others']:.2f} | "
                     f"{r['diff']:+.2f} {fmt_interval(*r['ci95'], digits=2)} | "
                     f"{'yes' if r['check'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", help="a verdict run directory (ambiqa evaluate --out)")
    ap.add_argument("--out", required=True, help="output stem: writes STEM.md and STEM.json")
    args = ap.parse_args(argv)
    try:
        result = analyse(Path(args.run))
    except AmbiqaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    command = "python -m benchmarks.verdict_rules " + " ".join(argv or sys.argv[1:])
    stem = Path(args.out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(stem.with_suffix(".json"), result)
    atomic_write_text(stem.with_suffix(".md"), render(result, command))
    print(render(result, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
