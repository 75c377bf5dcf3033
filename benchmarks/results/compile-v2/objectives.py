"""Which traces would each compile objective pick? Stored ASQA *train* rows only (no LM call).

Issue 34 item 4 asks for the objective that generalises; the honest test is a compile per
objective scored paired on dev, which needs LM hours this run did not have. This is the cheap
part that training data allows: over the 60 stored rows of the 5 VerDICt variants on the first
12 ASQA train questions (``benchmarks/results/asqa-train-ab``, extractive:minilm-asqa-v2
reader), rank traces by each objective as bootstrap and random search would (per question:
the best of the 5 variants; overall: the top 12 traces, a demo pool) and report the form of
what each picks: median answer words (references: 61), STR-EM and D-F1.

    python benchmarks/results/compile-v2/objectives.py
"""

from __future__ import annotations

import json
import statistics as st
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OBJECTIVES = {"d-f1": lambda r: r["d-f1"], "dr (per question)": lambda r: r["dr_q"],
              "d-f1-cov": lambda r: (r["d-f1"] + r["str-em"]) / 2}


def main() -> None:
    rows = []
    for d in sorted((ROOT / "benchmarks/results/asqa-train-ab").glob("*/results.jsonl")):
        for line in d.open():
            r = json.loads(line)
            if r.get("error") or not r.get("metrics"):
                continue
            rows.append({"run": d.parent.name, "id": r["id"],
                         "words": len(str(r["prediction"]["answer"] or "").split()),
                         **r["metrics"]})
    ids = sorted({r["id"] for r in rows})
    out = {"n_rows": len(rows), "n_questions": len(ids),
           "all_median_words": st.median(r["words"] for r in rows), "objectives": {}}
    for name, f in OBJECTIVES.items():
        best = [max((r for r in rows if r["id"] == i), key=f) for i in ids]
        top = sorted(rows, key=f, reverse=True)[:12]
        out["objectives"][name] = {
            part: {"median_words": st.median(r["words"] for r in sel),
                   "str_em": round(st.mean(r["str-em"] for r in sel), 3),
                   "d_f1": round(st.mean(r["d-f1"] for r in sel), 3)}
            for part, sel in (("best_per_question", best), ("top12_traces", top))}
    path = Path(__file__).with_name("objectives.json")
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
