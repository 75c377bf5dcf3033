"""A writer-only candidate on dev, its upstream replayed from a stored run (issue 46).

A compile candidate that changes only the long-answer writer of Diva or ToC (``writer=gold:1``,
say) shares every upstream call with the program it was derived from: the compile's call memo
answers typing, rewriting, retrieval, verification and clarify from the candidate already
scored, and only the writer reaches the LM (:mod:`ambiqa.optimizers.select`). This does the
same on a held-out split: it reads a stored ``ambiqa evaluate diva`` (or ``toc``) run
(``--upstream``, whose rows keep each question's path, readings and kept passages), gives the
writer the demos the plan names -- drawn from the training questions exactly as ``ambiqa
compile --select-val N`` draws them, same carve, same seed -- and on every question that took
the RAG path calls the writer alone, with the stored pairs and passages. A closed-book question
keeps its stored answer (the writer is not on its path). ToC has no closed-book path: its
writer runs on every question, over the tree's kept readings and the passages it chose for them
(whole passages, as ToC's default shows them; an upstream run with ``trim_sentences`` set would
have shown the writer trimmed ones, which the replay cannot recover). The result is an ordinary
run directory, scored with the same metrics and reader, so ``ambiqa compare UPSTREAM OUT``
pairs the two arms.

What this measures, and what not: the writer's effect with everything upstream held fixed --
the comparison the compile itself makes. A full run of the candidate would also resample the
upstream steps (Diva decodes at temperature 0.3), so its paired interval would be wider; the
writer's own sampling stays in (``--plan writer=none`` reruns the zero-shot writer on the same
inputs: the run-to-run spread the writer alone adds). ToC decodes at temperature 0, so its
replayed zero-shot writer should reproduce the stored answers.

    python -m benchmarks.writer_replay --upstream benchmarks/results/loop-guard/runs/on \\
        --plan writer=gold:1 --train asqa:train:36 --select-val 12 --data asqa:dev:60 \\
        --out benchmarks/results/compile-v6/runs/writer-gold1 --resume --threads 2
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.fsutil import atomic_write_text
from ambiqa.programs.base import AmbiqaProgram
from ambiqa.types import Interpretation, Passage

WRITER = "long_answer.write"
#: the programs whose writer this replays: both build it from ``LongAnswerStep``
PROGRAMS = ("diva", "toc")


def on_writer_path(pred: dict[str, Any]) -> bool:
    """Whether the writer ran on this stored prediction: Diva's RAG path; ToC records no path
    (its writer runs on every question)."""
    return pred.get("path", "rag") == "rag"


def load_upstream(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The stored predictions of ``run_dir`` by question; refuses a run without passages
    (a copy that left them out cannot feed the writer) or with a question twice."""
    path = Path(run_dir) / "results.jsonl"
    if not path.is_file():
        raise ConfigError(f"{path}: no results.jsonl", hint="--upstream names a run directory")
    rows: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        pred = row.get("prediction") or {}
        if row.get("error") or not pred:
            continue
        if on_writer_path(pred) and pred.get("interpretations") and not pred.get("passages"):
            raise ConfigError(f"{path}: question {row['id']} has no stored passages",
                              hint="use the run that made the rows, not a copy without them")
        if row["question"] in rows:
            raise ConfigError(f"{path}: question {row['question']!r} appears twice")
        rows[row["question"]] = pred
    return rows


class WriterReplay(AmbiqaProgram):
    """A program's writer over stored upstream predictions (see the module docstring)."""

    name = "writer_replay"
    needs_retriever = False
    min_lm_rounds = 1

    def __init__(self, long_answer: Any, upstream: dict[str, dict[str, Any]]) -> None:
        super().__init__(None)
        self.long_answer = long_answer
        self.upstream = upstream

    def run(self, question: str) -> dict[str, Any]:
        stored = self.upstream.get(question)
        if stored is None:
            raise ConfigError(f"question not in the upstream run: {question!r}")
        out = {k: v for k, v in stored.items() if k != "trace"}
        if not on_writer_path(stored):
            return out  # closed book: the writer is not on this question's path
        pairs = [Interpretation(p["question"], p["answer"], list(p.get("passages") or []))
                 for p in stored.get("interpretations") or []]
        passages = [Passage(p["id"], p.get("title", ""), p["text"], float(p.get("score", 0.0)))
                    for p in stored["passages"]]
        out["answer"] = self.long_answer(question=question, pairs=pairs, passages=passages)
        return out


def writer_with_plan(plan: str, train: str, select_val: int, seed: int = 0,
                     program_name: str = "diva") -> tuple[Any, dict]:
    """``program_name``'s writer step (with its decoding: Diva's temperature 0.3, ToC's 0) and
    the demos ``plan`` gives it, drawn from the training part of ``train`` as ``ambiqa compile
    PROGRAM --select-val`` carves it; and what was applied."""
    from ambiqa.api.plan import load_data
    from ambiqa.api.targets import resolve
    from ambiqa.optimizers.compile import CompileReport, carve_validation, without_demos
    from ambiqa.optimizers.demo_plan import apply_plan, parse_plan, resolve_plan
    from ambiqa.optimizers.recipes import get_recipe, usable_examples

    if program_name not in PROGRAMS:
        raise ConfigError(f"--program {program_name!r}: the replay knows "
                          f"{', '.join(PROGRAMS)}")
    program = without_demos(resolve(program_name, with_index=False).program)
    parsed = resolve_plan(program, parse_plan(plan))
    if set(parsed) != {WRITER}:
        raise ConfigError(f"--plan {plan!r} names {', '.join(sorted(parsed))}; this replays "
                          f"the writer only", hint="e.g. --plan writer=gold:1")
    if parsed[WRITER].source in ("signal", "bootstrap"):
        raise ConfigError("--plan: signal and bootstrap writer demos need a traced pass; "
                          "use gold or none here")
    examples, spec = load_data(train)
    usable = usable_examples(examples, get_recipe(program_name), "d-f1", spec or train)
    rest, _val = carve_validation(usable, select_val, seed,
                                  CompileReport(optimizer="none", settings={}))
    applied = apply_plan(program, parsed, rest, seed=seed)
    demos = [{"question": d.get("question"), "words": len(str(d.get("long_answer")).split())}
             for d in program.long_answer.write.demos]
    return program.long_answer, {"program": program_name, "plan": plan, "applied": applied,
                                 "demos": demos,
                                 "train": train, "select_val": select_val, "seed": seed}


def check_artifact(path: Path, long_answer: Any) -> list[str]:
    """Refuse unless the compiled artifact at ``path`` shows its writer the demos the replay
    gives it (question and long answer of each, in order): then the dev arm is that
    artifact's writer. Returns the artifact's other predictors that hold demos (the replay
    takes theirs from the upstream run, which must have run with the same ones)."""
    try:
        state = json.loads(Path(path).read_text(encoding="utf-8"))["state"]
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"--artifact {path}: not a readable ambiqa artifact ({exc})") from exc
    got = [(d.get("question"), d.get("long_answer"))
           for d in (state.get(WRITER) or {}).get("demos") or []]
    want = [(d.get("question"), d.get("long_answer")) for d in long_answer.write.demos]
    if got != want:
        raise ConfigError(f"--artifact {path}: its writer shows {len(got)} demo(s) that are not "
                          f"the plan's {len(want)}",
                          hint="the replay would not be that artifact's writer")
    return sorted(n for n, st in state.items() if n != WRITER and (st or {}).get("demos"))


#: an answer that talks about its inputs ("This is stated in the first interpretation")
_META = re.compile(r"\b(interpretations?|passages?)\b", re.I)


def answer_form(run_dir: Path) -> dict[str, Any]:
    """How a run's long answers read, over its RAG-path questions (where the writer ran):
    median words and sentences, answers that talk about the interpretations or passages
    they were given, answers stating at most one of two or more distinct answers they were
    handed (``collapsed``), and the writer's calls cut at its output cap."""
    from benchmarks.stored_runs import words
    from benchmarks.writer_length import collapsed, run_rows, sentences

    rows = [r for r in run_rows(Path(run_dir)) if not r.get("error")
            and on_writer_path(r.get("prediction") or {})]
    answers = [str(r["prediction"].get("answer") or "") for r in rows]
    writer = [((r.get("cost") or {}).get("by_signature") or {}).get("WriteLongAnswer") or {}
              for r in rows]
    return {"run": str(run_dir), "n_rag": len(rows),
            "median_words": statistics.median(map(words, answers)) if answers else None,
            "median_sentences": statistics.median(map(sentences, answers)) if answers else None,
            "meta": sum(bool(_META.search(a)) for a in answers),
            "collapsed": collapsed(rows),
            # a run answered from the response cache counts no tokens and no cut replies
            "writer_calls": sum(int(w.get("calls") or 0) for w in writer
                                if w.get("output_tokens")),
            "writer_cut": sum(int(w.get("truncated") or 0) for w in writer)}


def render_form(forms: list[dict[str, Any]], command: str) -> str:
    lines = [f"`{command}` -- over each run's RAG-path questions (the writer's); no LM call. "
             "Talks about its inputs: the answer says \"interpretation\" or \"passage\". "
             "Collapsed: of the questions whose readings gave two or more distinct answers, "
             "answers stating at most one of them. Cut: writer calls stopped at the output cap "
             "(calls that decoded: a call answered from the response cache records none).", "",
             "| run | RAG questions | median words | median sentences | talks about its inputs "
             "| collapsed | writer calls cut |", "|---|---:|---:|---:|---:|---:|---:|"]
    for f in forms:
        c = f["collapsed"]
        cut = f"{f['writer_cut']} of {f['writer_calls']}" if f["writer_calls"] else "–"
        lines.append(f"| `{f['run']}` | {f['n_rag']} | {f['median_words']:g} "
                     f"| {f['median_sentences']:g} | {f['meta']} of {f['n_rag']} "
                     f"| {c['collapsed']} of {c['questions']} | {cut} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", nargs="+", type=Path, metavar="RUN", default=None,
                    help="only tabulate how these runs' answers read (no LM call) into --out")
    ap.add_argument("--upstream", type=Path, help="a stored Diva or ToC run directory")
    ap.add_argument("--program", choices=PROGRAMS, default="diva",
                    help="the program that made --upstream (its writer and decoding)")
    ap.add_argument("--plan", help="the writer's demos: writer=gold:K | none")
    ap.add_argument("--train", default="asqa:train:36")
    ap.add_argument("--select-val", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--artifact", type=Path, default=None,
                    help="a compiled artifact whose writer demos must be the plan's (checked)")
    ap.add_argument("--data", help="the upstream run's data, e.g. asqa:dev:60")
    ap.add_argument("--metrics", default="str-em,rouge-l,d-f1,dr")
    ap.add_argument("--reader", default=None, help="D-F1 reader (default: the shipped one)")
    ap.add_argument("--out", required=True, type=Path,
                    help="the run directory (with --report: the Markdown file)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    if args.report:
        command = ("python -m benchmarks.writer_replay --report "
                   + " ".join(map(str, args.report)) + f" --out {args.out}")
        atomic_write_text(args.out, render_form([answer_form(r) for r in args.report],
                                                command))
        return 0
    missing = [f"--{k}" for k in ("upstream", "plan", "data") if getattr(args, k) is None]
    if missing:
        ap.error("the arguments " + ", ".join(missing) + " are required (or --report)")

    import ambiqa
    from ambiqa.lm.factory import LMSpec

    upstream = load_upstream(args.upstream)  # before any model loads
    writer, applied = writer_with_plan(args.plan, args.train, args.select_val, args.seed,
                                       args.program)
    for d in applied["demos"]:
        print(f"writer demo: {d['question']!r} ({d['words']} words)")
    if args.artifact is not None:
        others = check_artifact(args.artifact, writer)
        print(f"{args.artifact}: its writer demos are the plan's; other predictors with demos "
              f"(taken from the upstream run): {', '.join(others) or 'none'}")
    result = ambiqa.evaluate(
        WriterReplay(writer, upstream), args.data, metrics=args.metrics, reader=args.reader,
        out=args.out, resume=args.resume, threads=args.threads, progress=True,
        lm=LMSpec(),  # $AMBIQA_LM or the embedded default, recorded in run.json
        extra={"writer_replay": {**applied, "upstream": str(args.upstream)}})
    print(json.dumps(result.metrics, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
