"""The loop guard's effect on a program's answers, paired, replayed from the response cache
(issue 45).

The guard (:mod:`ambiqa.lm.loop_guard`) keeps ``cut_loop(reply)`` of what the LM would have
written unguarded, so a run replayed from the response cache -- whose replies were stored
before the guard -- gives the guarded program's answers without decoding anything again. Two
arms over the same questions with today's code:

* ``on``: ``ambiqa evaluate`` as a user runs it (the guard is on by default);
* ``off``: the same with the adapter's cut switched off in this process. The embedded LM keeps
  the default cache identity so the stored replies answer; a call the cache cannot answer
  would reach the (guarded) engine, so the arm counts those calls, and a question that needed
  one is not a faithful unguarded replay (reported).

``summary`` reads both runs and writes what changed: answers cut, replies cut (``loops_cut``),
words per answer, and the decode tokens the live guard would not have spent on the writer's
loops -- estimated from the stored unguarded run's output tokens, in proportion to the
characters of each answer the cut removes (the cached replay decodes nothing, so it has no
timing of its own). Paired STR-EM / ROUGE-L come from ``ambiqa compare`` over the two runs.

    python -m benchmarks.loop_replay off -- diva --data asqa:dev:60 --index wiki-dense \\
        --metrics str-em,rouge-l --threads 2 --out benchmarks/results/loop-guard/runs/off
    ambiqa evaluate diva ... --out benchmarks/results/loop-guard/runs/on
    python -m benchmarks.loop_replay summary benchmarks/results/loop-guard/runs/off \\
        benchmarks/results/loop-guard/runs/on \\
        --stored benchmarks/results/compile-v4/runs/diva-zeroshot \\
        --out benchmarks/results/loop-guard
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from ambiqa.fsutil import atomic_write_text
from benchmarks.readings import answered
from benchmarks.stored_runs import ROOT, words
from benchmarks.stored_runs import rel as _rel


def run_off(evaluate_args: list[str]) -> int:
    """``ambiqa evaluate`` with the adapter's loop cut switched off in this process."""
    import ambiqa.lm.adapter as adapter
    from ambiqa.cli import main

    adapter.guard_enabled = lambda: False  # type: ignore[assignment]
    return main(["evaluate", *evaluate_args])


def rel(path: Path) -> str:
    return _rel(path, ROOT)


def _words(row: dict[str, Any]) -> int:
    return words((row.get("prediction") or {}).get("answer"))


def _live(row: dict[str, Any]) -> int:
    cost = row.get("cost") or {}
    return int(cost.get("lm_calls", 0)) - int(cost.get("cached_calls", 0))


def summarize(off: Path, on: Path, stored: Path | None = None) -> dict[str, Any]:
    """What the guard changed between the two replays (see module)."""
    a, b = answered(off), answered(on)
    ids = [q for q in a if q in b]
    ref = answered(stored) if stored is not None else {}
    changed, saved_tokens, writer_tokens = [], 0.0, 0
    for qid in ids:
        before = str((a[qid].get("prediction") or {}).get("answer") or "")
        after = str((b[qid].get("prediction") or {}).get("answer") or "")
        if before != after:
            changed.append({"id": qid, "question": a[qid]["question"], "words_off": _words(a[qid]),
                            "words_on": _words(b[qid]), "tail_removed": before[len(after):][:240]
                            if before.startswith(after) else None})
        out = ((ref.get(qid, {}).get("cost") or {}).get("by_signature") or {}).get(
            "WriteLongAnswer", {}).get("output_tokens", 0)
        writer_tokens += int(out)
        if out and before and before.startswith(after) and before != after:
            saved_tokens += out * (len(before) - len(after)) / len(before)
    return {
        "off": rel(off), "on": rel(on), "stored": rel(stored) if stored else None,
        "questions": len(ids),
        "answers_changed": len(changed),
        "answers_cut_as_prefix": sum(c["tail_removed"] is not None for c in changed),
        "loops_cut_on": sum(int((b[q].get("cost") or {}).get("loops_cut", 0)) for q in ids),
        "live_calls_off": sum(_live(a[q]) for q in ids),
        "questions_with_live_calls_off": sum(_live(a[q]) > 0 for q in ids),
        "live_calls_on": sum(_live(b[q]) for q in ids),
        "median_words_off": statistics.median(_words(a[q]) for q in ids) if ids else 0,
        "median_words_on": statistics.median(_words(b[q]) for q in ids) if ids else 0,
        "writer_output_tokens_stored": writer_tokens,
        "writer_tokens_not_decoded_est": round(saved_tokens),
        "changed": changed,
    }


def render(s: dict[str, Any], command: str) -> str:
    n = s["questions"]
    lines = [
        "# Loop guard, replayed from the response cache (issue 45)", "",
        f"`{command}` -- no LM decoding: both arms replay the replies stored before the guard; "
        "`on` cuts each looping reply to its first copy as the live guard does (`cut_loop`).",
        "",
        f"- runs: off `{s['off']}`, on `{s['on']}` ({n} questions, paired)",
        f"- answers changed by the guard: {s['answers_changed']} of {n} "
        f"({s['answers_cut_as_prefix']} of them the unguarded answer cut short)",
        f"- replies cut in the `on` arm (`loops_cut`): {s['loops_cut_on']}",
        f"- calls the cache could not answer: off {s['live_calls_off']} "
        f"(in {s['questions_with_live_calls_off']} questions), on {s['live_calls_on']}",
        f"- median answer: {s['median_words_off']} words off, {s['median_words_on']} on",
    ]
    if s["stored"]:
        lines.append(
            f"- writer decode tokens the live guard would not spend (estimate, from "
            f"`{s['stored']}`'s output tokens in proportion to the characters cut): "
            f"~{s['writer_tokens_not_decoded_est']} of {s['writer_output_tokens_stored']}")
    lines += ["", "| question | words off | words on | what the guard removed (start) |",
              "|---|---:|---:|---|"]
    for c in s["changed"]:
        tail = (c["tail_removed"] or "(not a prefix: an earlier step changed)").replace(
            "\n", " ").replace("|", "/")
        lines.append(f"| {c['question']} | {c['words_off']} | {c['words_on']} | "
                     f"{tail[:160]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["off"]:
        rest = argv[1:]
        return run_off(rest[1:] if rest[:1] == ["--"] else rest)
    ap = argparse.ArgumentParser(prog="python -m benchmarks.loop_replay",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("off", help="ambiqa evaluate ARGS with the adapter's cut off")
    sm = sub.add_parser("summary", help="what the guard changed between two replays")
    sm.add_argument("off", type=Path)
    sm.add_argument("on", type=Path)
    sm.add_argument("--stored", type=Path, help="the unguarded run the replies came from")
    sm.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    s = summarize(args.off, args.on, args.stored)
    command = "python -m benchmarks.loop_replay summary " + " ".join(argv[1:])
    import json

    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "loop_replay.json", json.dumps(s, indent=1) + "\n")
    atomic_write_text(args.out / "loop_replay.md", render(s, command))
    print(render(s, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
