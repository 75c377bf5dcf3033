"""What Diva's writer (or clarify) is handed and writes, over a compile's traced pass (#46).

A ``writer=signal:k`` candidate takes its demos from one traced pass of the program over the
compile's training questions. This replays that pass -- the same program (zero-shot Diva),
the same training part of ``--train`` (the validation questions carved out exactly as
``ambiqa compile --select-val N`` carves them, same seed) -- and, for every long-answer writer
call, prints what the signal judges: how many distinct readings the writer was given, how many
gold qa pairs the question has, the answer's STR-EM against them, its length beside the
references' median, and the writer signal's score
(:func:`ambiqa.optimizers.signals.writer_score`). It says which calls would become demos.
``--step clarify`` does the same for the clarify calls
(:func:`~ambiqa.optimizers.signals.clarify_score`: gold coverage, distinct answers, pairs
that add a word to the asked question), into ``clarify-pool``.

Run after a compile with the same settings, every LM call is answered from DSPy's response
cache (same requests, same replies): no LM time. On a fresh cache it makes the calls.

    python -m benchmarks.writer_pool --train asqa:train:36 --select-val 12 --index wiki-dense
    python -m benchmarks.writer_pool --step clarify

Writes ``benchmarks/results/compile-v5/writer-pool.json`` and ``.md`` (temp file + rename).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ambiqa.fsutil import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "compile-v5" / "writer-pool"
WRITER = "WriteLongAnswer"
CLARIFY = "ClarifyFromPassages"


def _judged_calls(records: list[Any], signature: str) -> Iterator[tuple[Any, Any, Any]]:
    """(record, step, the signal's judgement) for each call of ``signature`` in the traced
    ``records`` (:class:`~ambiqa.optimizers.signals.TraceRecord`)."""
    from ambiqa.optimizers.signals import judge_call

    for rec in records:
        for step in rec.steps:
            if step.signature == signature:
                yield rec, step, judge_call(step.signature, step.inputs, step.outputs,
                                            rec.example, rec.prediction)


def pool_rows(records: list[Any]) -> list[dict[str, Any]]:
    """One row per writer call of the traced ``records``, best writer signal first."""
    from ambiqa.evaluation.metrics import str_em
    from ambiqa.optimizers.signals import given_answers, reference_words

    rows = []
    for rec, step, judged in _judged_calls(records, WRITER):
        answer = str(step.outputs.get("long_answer", ""))
        given = str(step.inputs.get("interpretations", ""))
        rows.append({"question": rec.example.question,
                     "lines": sum(" -> " in line for line in given.splitlines()),
                     "given": len(given_answers(given)),
                     "gold_pairs": len(rec.example.qa_pairs),
                     "str_em": round(str_em(answer, rec.example.qa_pairs), 3),
                     "words": len(answer.split()),
                     "reference_words": reference_words(rec.example),
                     "signal": round(judged.score, 3), "right": judged.correct,
                     "end_score": round(rec.score, 3)})
    rows.sort(key=lambda r: -r["signal"])
    return rows


def clarify_rows(records: list[Any]) -> list[dict[str, Any]]:
    """One row per clarify call of the traced ``records``, best clarify signal first: the
    pairs written, how many share an answer, how many only restate the asked question."""
    from ambiqa.evaluation.metrics import field_value, normalize_answer
    from ambiqa.optimizers.signals import restates

    rows = []
    for rec, step, judged in _judged_calls(records, CLARIFY):
        asked = str(step.inputs.get("question", ""))
        pairs = [(str(field_value(p, "question", "") or ""),
                  str(field_value(p, "answer", "") or ""))
                 for p in step.outputs.get("pairs") or []]
        rows.append({"question": asked, "pairs": len(pairs),
                     "distinct_answers": len({normalize_answer(a) for _, a in pairs
                                              if normalize_answer(a)}),
                     "restating": sum(restates(q, asked) for q, _ in pairs),
                     "gold_pairs": len(rec.example.qa_pairs),
                     "signal": round(judged.score, 3), "right": judged.correct,
                     "written": [f"{q} -> {a}" for q, a in pairs],
                     "end_score": round(rec.score, 3)})
    rows.sort(key=lambda r: -r["signal"])
    return rows


def measure(train: str, select_val: int, index: str, seed: int = 0,
            metric: str = "str-rouge", step: str = "writer") -> dict[str, Any]:
    """Replay the traced pass; one row per writer call (see the module docstring)."""
    import ambiqa
    from ambiqa.api.jobs import use_lm
    from ambiqa.api.plan import load_data
    from ambiqa.api.targets import resolve
    from ambiqa.evaluation.registry import dspy_metric
    from ambiqa.optimizers.compile import CompileReport, carve_validation, without_demos
    from ambiqa.optimizers.recipes import get_recipe, usable_examples
    from ambiqa.optimizers.signals import collect_traces

    use_lm(ambiqa.make_lm())
    program = without_demos(resolve("diva", index=index).program)
    examples, spec = load_data(train)
    usable = usable_examples(examples, get_recipe("diva"), metric, spec or train)
    rest, _val = carve_validation(usable, select_val, seed,
                                  CompileReport(optimizer="none", settings={}))
    records = collect_traces(program, rest, dspy_metric(metric), threads=2)
    command = (f"python -m benchmarks.writer_pool --train {train} --select-val {select_val} "
               f"--index {index}")
    if step == "clarify":
        rows = clarify_rows(records)
        return {"command": command + " --step clarify", "train": train,
                "select_val": select_val, "questions": len(rest), "traced": len(records),
                "clarify_calls": len(rows), "right": sum(r["right"] for r in rows),
                "restating_calls": sum(r["restating"] > 0 for r in rows), "rows": rows}
    rows = pool_rows(records)
    return {"command": command,
            "train": train, "select_val": select_val, "questions": len(rest),
            "traced": len(records), "writer_calls": len(rows),
            "given_one": sum(r["given"] <= 1 for r in rows),
            "one_line": sum(r["lines"] <= 1 for r in rows),
            "gold_several": sum(r["gold_pairs"] >= 2 for r in rows),
            "right": sum(r["right"] for r in rows), "rows": rows}


def render(m: dict[str, Any]) -> str:
    rows = m["rows"]
    med = statistics.median(r["words"] for r in rows) if rows else 0
    out = [f"# What Diva's writer is handed on {m['train']} (training part: "
           f"{m['questions']} questions)", "", f"`{m['command']}`", "",
           f"{m['writer_calls']} writer calls over {m['traced']} traced questions (the rest "
           f"answered closed book). Given one reading: **{m['given_one']} of "
           f"{m['writer_calls']}** (one reading written at all: {m.get('one_line', '–')}; "
           f"the rest: several readings sharing one answer); questions with two or more gold "
           f"qa pairs: {m['gold_several']} of {m['writer_calls']}. Median answer {med:g} "
           f"words. Calls "
           f"the writer signal rates right (>= 0.5), i.e. that `writer=signal:k` could make "
           f"demos of: **{m['right']}**.", "",
           "| signal | right | distinct readings given (lines) | gold pairs | STR-EM | words "
           "| refs' median | end score | question |",
           "|---:|:-:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['signal']:.3f} | {'yes' if r['right'] else ''} | "
                   f"{r['given']} ({r.get('lines', '–')}) | "
                   f"{r['gold_pairs']} | {r['str_em']:.2f} | {r['words']} | "
                   f"{r['reference_words'] or '–'} | {r['end_score']:.3f} | "
                   f"{r['question']} |")
    return "\n".join(out) + "\n"


def render_clarify(m: dict[str, Any]) -> str:
    """The clarify table: every call, its signal and what it wrote (best first)."""
    out = [f"# What Diva's clarify step writes on {m['train']} (training part: "
           f"{m['questions']} questions)", "", f"`{m['command']}`", "",
           f"{m['clarify_calls']} clarify calls over {m['traced']} traced questions; calls "
           f"with a pair that only restates the asked question: **{m['restating_calls']}**; "
           f"calls the clarify signal rates right (>= 0.5), i.e. that `clarify=signal:k` "
           f"could make demos of: **{m['right']}**. Demos are taken best first.", "",
           "| signal | right | pairs | distinct answers | restating | gold pairs | end score "
           "| question | pairs written |", "|---:|:-:|---:|---:|---:|---:|---:|---|---|"]
    for r in m["rows"]:
        written = "; ".join(w.replace("|", "/") for w in r["written"])
        out.append(f"| {r['signal']:.3f} | {'yes' if r['right'] else ''} | {r['pairs']} | "
                   f"{r['distinct_answers']} | {r['restating']} | {r['gold_pairs']} | "
                   f"{r['end_score']:.3f} | {r['question']} | {written} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", default="asqa:train:36")
    ap.add_argument("--select-val", type=int, default=12)
    ap.add_argument("--index", default="wiki-dense")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step", choices=("writer", "clarify"), default="writer")
    ap.add_argument("--out", type=Path, default=None,
                    help="path stem (default compile-v5/writer-pool or clarify-pool)")
    args = ap.parse_args(argv)
    out = args.out or DEFAULT_OUT.with_name(f"{args.step}-pool")
    report = measure(args.train, args.select_val, args.index, args.seed, step=args.step)
    atomic_write_json(out.with_suffix(".json"), report)
    text = render_clarify(report) if args.step == "clarify" else render(report)
    atomic_write_text(out.with_suffix(".md"), text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
