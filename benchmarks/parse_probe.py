"""Read the replies that fail to parse: Diva's typing and rewriting steps on ASQA dev questions.

The stored evaluation rows count parse failures per signature (``benchmarks.signature_budget``)
but keep no reply text, so they cannot say *why* a reply failed. This probe runs Diva's first
two LM steps (:class:`ambiqa.programs.diva.InferInterpretations`: TypeAmbiguity, then
PseudoInterpretations, with the paper's decoding) on ASQA dev questions with the embedded LM
and records every adapter parse -- adapter, signature, whether it parsed, the reply text -- so
the failures can be read and sorted into forms:

* ``list as Markdown`` -- a ``list[str]`` field written as ``- item`` lines (``distinct`` or
  ``repeats an item``), which :mod:`ambiqa.lm.adapter` reads when the items are distinct;
* ``cut at the cap`` -- the reply ends mid-sentence before its last field: it ran into the
  signature's output cap (a repeating reason, typically);
* ``stopped without a field`` -- the reply ended early without every output field;
* ``other``.

Rows are appended to ``benchmarks/results/parse-probe/rows.jsonl`` one question at a time
(``--resume`` skips questions already there); the table goes to ``parse_probe.md``. The rows
written before ``ambiqa/lm/adapter.py`` existed were made with DSPy's ChatAdapter (``adapter``
in each row says which).

    nice python -m benchmarks.parse_probe --start 30 --end 60 --resume
    python -m benchmarks.parse_probe --report-only
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "parse-probe"
COMMAND = "python -m benchmarks.parse_probe"


def classify(parse: dict[str, Any]) -> str:
    """The form of one failed parse (see the module docstring)."""
    from ambiqa.lm.adapter import markdown_list

    text = str(parse.get("text") or "")
    error = str(parse.get("error") or "")
    if "Failed to parse field" in error:
        body = text.split("## ]]", 1)[-1]
        items = markdown_list(body.split("[[ ##")[0])
        if items is not None:
            distinct = len({" ".join(x.lower().split()) for x in items}) == len(items)
            return "list as Markdown, " + ("distinct" if distinct else "repeats an item")
        return "other"
    # the rows keep no token counts: a reply that ends mid-sentence ran into its output cap
    if text.rstrip() and text.rstrip()[-1] not in ".!?\"')]":
        return "cut at the cap"
    return "stopped without a field"


def report(rows: list[dict[str, Any]]) -> str:
    """Per signature: first-try parses and the forms of the failures."""
    first: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    forms: Counter[tuple[str, str]] = Counter()
    recovered: Counter[str] = Counter()
    for row in rows:
        seen: set[str] = set()
        for p in row["parses"]:
            sig = p["signature"]
            if p["adapter"] == "JSONAdapter":
                recovered[sig] += bool(p["ok"])
                continue
            if sig in seen:
                continue
            seen.add(sig)
            first[sig] += 1
            if not p["ok"]:
                failed[sig] += 1
                forms[(sig, classify(p))] += 1
    lines = ["# Why replies fail to parse: Diva's typing and rewriting (embedded 1.5B)", "",
             f"`{COMMAND} --report-only` over `benchmarks/results/parse-probe/rows.jsonl` "
             f"({len(rows)} ASQA dev questions). A failed ChatAdapter parse makes DSPy call "
             "the LM again with the JSONAdapter (*recovered*: that retry parsed).", "",
             "| signature | first tries | failed | recovered by the retry | forms |",
             "|---|---:|---:|---:|---|"]
    for sig in sorted(first):
        f = "; ".join(f"{form}: {n}" for (s, form), n in sorted(forms.items()) if s == sig)
        lines.append(f"| {sig} | {first[sig]} | {failed[sig]} | {recovered[sig]} | {f or '–'} |")
    return "\n".join(lines) + "\n"


def probe(start: int, end: int, out: Path, resume: bool) -> None:
    """Run the two steps on dev questions [start, end), appending one row per question."""
    import dspy
    from dspy.utils.callback import BaseCallback

    import ambiqa
    from ambiqa.data.specs import load_dataset
    from ambiqa.programs.diva import PAPER_DECODING, InferInterpretations, decoding_config

    done = set()
    if resume and out.exists():
        done = {json.loads(line)["question"] for line in out.read_text().splitlines() if line}
    parses: list[dict[str, Any]] = []

    class Tap(BaseCallback):
        def __init__(self) -> None:
            self.starts: dict[str, tuple[str, str, str]] = {}

        def on_adapter_parse_start(self, call_id: str, instance: Any, inputs: dict) -> None:
            self.starts[call_id] = (type(instance).__name__, inputs["signature"].__name__,
                                    inputs.get("completion") or "")

        def on_adapter_parse_end(self, call_id: str, outputs: Any,
                                 exception: BaseException | None = None) -> None:
            adapter, sig, text = self.starts.pop(call_id, ("?", "?", ""))
            rec = {"adapter": adapter, "signature": sig, "ok": exception is None, "text": text}
            if exception is not None:
                rec["error"] = str(exception)[:300]
            parses.append(rec)

    ambiqa.configure(ambiqa.make_lm("embedded"), callbacks=[Tap()])
    adapter = type(dspy.settings.adapter).__module__ if dspy.settings.adapter else "dspy"
    step = InferInterpretations(lm_config=decoding_config(**PAPER_DECODING))
    out.parent.mkdir(parents=True, exist_ok=True)
    for ex in load_dataset(f"asqa:dev:{end}")[start:end]:
        if ex.question in done:
            continue
        parses.clear()
        result = step(question=ex.question)
        row = {"question": ex.question, "adapter": adapter, "result": result,
               "parses": list(parses)}
        with out.open("a", encoding="utf-8") as f:  # one whole line per question
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", type=int, default=30)
    ap.add_argument("--end", type=int, default=60)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)
    rows_path = OUT / "rows.jsonl"
    if not args.report_only:
        probe(args.start, args.end, rows_path, args.resume)
    if not rows_path.exists():
        print(f"no rows at {rows_path}: run the probe first", file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
    text = report(rows)
    tmp = OUT / "parse_probe.md.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(OUT / "parse_probe.md")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
