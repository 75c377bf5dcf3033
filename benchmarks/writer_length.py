"""Answer length against the long-answer writer's demo length, per stored ASQA run (no LM call).

For every stored run directory under ``benchmarks/results/`` (a ``run.json`` beside a
``results.jsonl``) whose data is ASQA, this reads the run's program: a registry name is a
zero-shot run (writer demos: none); a path is a compiled artifact, found at the path
``run.json`` names (an absolute path written on another checkout is looked up again under this
repository's ``benchmarks/results/``) and checked against the run's ``artifact_sha256``. From
the artifact's state it takes the long-answer writer -- the predictor whose signature has
:class:`~ambiqa.signatures.answering.WriteLongAnswer`'s fields (``long_answer.write`` in Diva
and vanilla_rag, ``write_long_answer.write`` in VerDICt) -- and the length in words of each of
its demos' long answers. Per run it prints the writer demos' lengths, the run's median answer
length in words over its answered questions (n) and the references' median on the same
questions (a question's reference length is the median of its annotators' long answers, ASQA
dev from the shared data).

Also: each writer demo, read -- how many distinct answers its interpretations gave, how many of
them the demo's long answer states, and in how many sentences (a demo that collapses two
readings into one sentence with one answer teaches the writer that form); the runs shown the
same writer demos, compared on the questions they share; and the rank correlation between the
demos' median length and the answers' median length across the compiled runs.

Runs whose answers are identical (``evidence-rescored/`` re-scores ``evidence/`` with another
reader: same answers) are listed once, with their copies named. A ``knn`` artifact keeps a
demo pool and shows each question the k nearest demos; its row lists the pool.

    python -m benchmarks.writer_length

Writes ``benchmarks/results/writer-length/writer_length.md`` and ``writer_length.json``
(atomically: temp file + rename).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks.stored_runs import (
    RESULTS,
    ROOT,
    References,
    answers_fingerprint,
    cached_references,
    find_artifact,
    find_runs,
    load_references,
    rel,
    words,
)

OUT = f"{RESULTS}/writer-length/writer_length"
COMMAND = "python -m benchmarks.writer_length"
#: the writer predictor's name in the programs ambiqa ships (used when the fields do not say)
WRITER_SUFFIX = "long_answer.write"


def sentences(text: Any) -> int:
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])", str(text or "").strip())
    return sum(1 for p in parts if p.strip())


def _median(values: Iterable[float]) -> float | None:
    got = list(values)
    return float(statistics.median(got)) if got else None


def _writer_prefixes() -> list[str]:
    from ambiqa.signatures.answering import WriteLongAnswer

    return [f.json_schema_extra.get("prefix") for f in WriteLongAnswer.fields.values()]


def writer_predictor(state: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The long-answer writer in an artifact's state: the predictor whose signature fields are
    WriteLongAnswer's (instructions may have been rewritten by an optimizer, the fields not),
    else the one named ``*long_answer.write``."""
    prefixes = _writer_prefixes()
    preds = [(k, v) for k, v in state.items() if isinstance(v, dict) and "demos" in v]
    for name, pred in preds:
        fields = ((pred.get("signature") or {}).get("fields") or [])
        if [f.get("prefix") for f in fields if isinstance(f, dict)] == prefixes:
            return name, pred
    return next(((k, v) for k, v in preds if k.endswith(WRITER_SUFFIX)), None)


def _answers(interpretations: Any) -> list[str]:
    """The answers of a demo's ``interpretations`` field (lines ``- question -> answer``)."""
    out = []
    for line in str(interpretations or "").splitlines():
        if "->" in line:
            out.append(line.rsplit("->", 1)[1].strip())
    return out


def read_demo(demo: dict[str, Any]) -> dict[str, Any]:
    """One writer demo: its length, sentences, and the distinct answers it was given/states."""
    from ambiqa.text import normalize_answer

    answer = str(demo.get("long_answer") or "")
    given = list(dict.fromkeys(a for a in (normalize_answer(x) for x in
                                           _answers(demo.get("interpretations"))) if a))
    text = normalize_answer(answer)
    stated = [a for a in given if a in text]
    return {"question": demo.get("question"), "words": words(answer),
            "sentences": sentences(answer), "readings": len(_answers(demo.get("interpretations"))),
            "distinct_answers": len(given), "answers_stated": len(stated),
            "long_answer": answer}


def writer_demos(spec: dict[str, Any], root: Path) -> dict[str, Any]:
    """What the run's long-answer writer was shown: ``status`` is ``zero-shot``, ``compiled``,
    ``not stored`` (the artifact is not in this checkout) or ``changed`` (its sha256 is not the
    run's); ``words`` lists the demos' lengths for a compiled artifact."""
    program = str(spec.get("program") or "")
    if isinstance(spec.get("writer_replay"), dict):
        return replayed_writer(spec["writer_replay"])
    if not program.endswith(".json"):
        return {"status": "zero-shot", "program": program, "optimizer": "zero-shot",
                "artifact": None, "predictor": None, "words": [], "demos": []}
    path = find_artifact(program, root)
    out: dict[str, Any] = {"status": "not stored", "program": "?", "optimizer": "?",
                           "artifact": program, "predictor": None, "words": None, "demos": []}
    if path is None:
        return out
    raw = path.read_bytes()
    out["artifact"] = rel(path, root)
    want = spec.get("artifact_sha256")
    if want and hashlib.sha256(raw).hexdigest() != want:
        return {**out, "status": "changed"}
    art = json.loads(raw)
    manifest = art.get("manifest") or {}
    opt = manifest.get("optimizer") or {}
    found = writer_predictor(art.get("state") or {})
    demos = [read_demo(d) for d in (found[1].get("demos") or [])] if found else []
    return {**out, "status": "compiled", "program": manifest.get("program", "?"),
            "optimizer": opt.get("name", "?"), "knn_k": opt.get("k") if opt.get("name") == "knn"
            else None, "predictor": found[0] if found else None,
            "words": [d["words"] for d in demos], "demos": demos}


def replayed_writer(replay: dict[str, Any]) -> dict[str, Any]:
    """The writer demos of a ``benchmarks.writer_replay`` run: drawn again from the training
    data exactly as that run drew them (its plan, split, carve and seed; no LM call)."""
    from benchmarks.writer_replay import WRITER, writer_with_plan

    program = str(replay.get("program") or "diva")  # runs before ToC's replay were Diva's
    step, _ = writer_with_plan(str(replay["plan"]), str(replay["train"]),
                               int(replay["select_val"]), int(replay.get("seed", 0)), program)
    demos = [read_demo(d.toDict()) for d in step.write.demos]
    return {"status": "compiled", "program": program,
            "optimizer": f"writer replay ({replay['plan']})",
            "artifact": f"writer replay: {replay['plan']}", "knn_k": None, "predictor": WRITER,
            "words": [d["words"] for d in demos], "demos": demos}


def run_rows(run_dir: Path) -> list[dict[str, Any]]:
    """A run's rows, one per question id (a resumed run's later row for an id wins)."""
    rows: dict[str, dict[str, Any]] = {}
    for line in (run_dir / "results.jsonl").read_text("utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            rows[str(row.get("id"))] = row  # a resumed run's later row for an id wins
    return list(rows.values())


def reading_answers(prediction: dict[str, Any]) -> list[str]:
    """The distinct (normalized) answers of the readings the program's writer was given: the
    prediction's ``interpretations`` (a list of ``{question, answer}``, or its repr as the rows
    store it)."""
    from ambiqa.text import normalize_answer

    items = prediction.get("interpretations")
    if isinstance(items, str):
        try:
            items = ast.literal_eval(items)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            items = []
    got = (normalize_answer(str(x.get("answer") or "")) for x in (items or [])
           if isinstance(x, dict))
    return [a for a in dict.fromkeys(got) if a]


def collapsed(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Over the answered questions whose readings gave two or more distinct answers: how many
    long answers state at most one of them (``collapsed``), and the answers given and stated."""
    from ambiqa.text import normalize_answer

    out = {"questions": 0, "collapsed": 0, "answers_given": 0, "answers_stated": 0}
    for r in rows:
        pred = r.get("prediction") or {}
        given = reading_answers(pred)
        if r.get("error") or len(given) < 2:
            continue
        text = normalize_answer(str(pred.get("answer") or ""))
        stated = sum(a in text for a in given)
        out["questions"] += 1
        out["collapsed"] += stated <= 1
        out["answers_given"] += len(given)
        out["answers_stated"] += stated
    return out


def answer_words(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Words per answered question (failed questions left out), by id."""
    return {str(r["id"]): words((r.get("prediction") or {}).get("answer"))
            for r in rows if not r.get("error")}


def measure_run(run_dir: Path, root: Path, refs: References) -> dict[str, Any]:
    spec = json.loads((run_dir / "run.json").read_text("utf-8"))
    rows = run_rows(run_dir)
    got = answer_words(rows)
    ref = refs(str(spec.get("data")))
    ref_words = [statistics.median(words(a) for a in ref[i]) for i in got if ref.get(i)]
    demos = writer_demos(spec, root)
    program = spec.get("program") if demos["status"] == "zero-shot" else demos["program"]
    return {"run": rel(run_dir, root / RESULTS), "program": program, "lm": spec.get("lm"),
            "data": spec.get("data"), "writer": demos, "answer_words": got,
            "median_words": _median(got.values()), "n": len(got),
            "median_sentences": _median(sentences((r.get("prediction") or {}).get("answer"))
                                        for r in rows if not r.get("error")),
            "multi_reading": collapsed(rows),
            "failed": sum(1 for r in rows if r.get("error")),
            "references_median": _median(ref_words), "answers_sha256": answers_fingerprint(rows)}


def _spearman(xs: list[float], ys: list[float]) -> float | None:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        out = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return out

    if len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else None


def measure(root: Path = ROOT, refs: References = load_references) -> dict[str, Any]:
    """Every stored long-answer run under ``root/benchmarks/results``, copies merged."""
    refs = cached_references(refs)
    measured = [measure_run(d, root, refs) for d in find_runs(root / RESULTS)]
    runs: dict[str, dict[str, Any]] = {}
    for m in sorted(measured, key=lambda m: (len(m["run"]), m["run"])):
        key = f"{m['answers_sha256']}:{m['writer']['artifact']}"
        if key in runs:
            runs[key]["copies"].append(m["run"])
        else:
            runs[key] = {**m, "copies": []}
    out = sorted(runs.values(), key=lambda m: m["run"])
    same: list[dict[str, Any]] = []
    with_demos = [m for m in out if m["writer"]["words"]]
    for i, a in enumerate(with_demos):
        for b in with_demos[i + 1:]:
            shared = sorted(set(a["answer_words"]) & set(b["answer_words"]))
            if a["writer"]["words"] != b["writer"]["words"] or not shared:
                continue
            same.append({"runs": [a["run"], b["run"]], "writer_words": a["writer"]["words"],
                         "n_shared": len(shared),
                         "median_words": [_median(a["answer_words"][q] for q in shared),
                                          _median(b["answer_words"][q] for q in shared)]})
    fixed = [m for m in with_demos if not m["writer"].get("knn_k")]
    xs = [statistics.median(m["writer"]["words"]) for m in fixed]
    ys = [m["median_words"] for m in fixed]
    return {"command": COMMAND, "runs": out, "same_writer_demos": same,
            "spearman": {"x": "writer demos' median words", "y": "answers' median words",
                         "n_runs": len(xs), "rho": _spearman(xs, ys)}}


def _demo_cell(w: dict[str, Any]) -> str:
    if w["status"] == "zero-shot":
        return "none"
    if w["status"] != "compiled":
        return f"unknown (artifact {w['status']})"
    if not w["words"]:
        return "none (0 demos)"
    if w.get("knn_k"):
        return (f"knn pool of {len(w['words'])} (median {statistics.median(w['words']):.0f}), "
                f"{w['knn_k']} per question")
    return "/".join(str(x) for x in w["words"])


def _share(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "–"


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


def render(m: dict[str, Any]) -> str:
    lines = ["# Answer length against the writer demos' length (stored ASQA runs)", "",
             f"`{m['command']}` -- every stored run under `{RESULTS}/` on ASQA; no LM call. "
             "Writer demos: the length in words of each long-answer demo the compiled artifact "
             "shows its writer (`WriteLongAnswer`'s predictor); median answer: over the run's "
             "answered questions (n); references: the median over the same questions of each "
             "question's median annotator long answer (ASQA dev). A run stored twice with the "
             "same answers (re-scored by another reader) is one row, its copy named. "
             "Sentences: the answers' median sentence count. Collapsed: of the questions whose "
             "readings (the writer's input) gave two or more distinct answers, how many long "
             "answers state at most one of them (an answer is stated when its normalized text "
             "occurs in the normalized long answer).", "",
             "| run | program | LM | optimizer | writer demos (words) | median answer (words) "
             "| n | references' median | sentences | collapsed |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|"]
    for r in m["runs"]:
        run = f"`{r['run']}`" + "".join(f" (= `{c}`)" for c in r["copies"])
        mr = r["multi_reading"]
        lines.append(f"| {run} | {r['program']} | {r['lm']} | {r['writer']['optimizer']} "
                     f"| {_demo_cell(r['writer'])} | {_num(r['median_words'])} | {r['n']} "
                     f"| {_num(r['references_median'])} | {_num(r['median_sentences'])} "
                     f"| {_share(mr['collapsed'], mr['questions'])} |")
    sp = m["spearman"]
    if sp["rho"] is not None:
        lines += ["", f"Rank correlation between the writer demos' median length and the "
                  f"answers' median length, over the {sp['n_runs']} runs shown fixed writer demos "
                  "(knn runs left out: each question sees its own 2 of the pool): "
                  f"Spearman rho = {sp['rho']:.2f}."]
    if m["same_writer_demos"]:
        lines += ["", "Runs shown the same writer demos, on the questions both answered:", "",
                  "| runs | writer demos (words) | median answer (words) | n shared |",
                  "|---|---|---|---:|"]
        for s in m["same_writer_demos"]:
            lines.append(f"| `{s['runs'][0]}` vs `{s['runs'][1]}` "
                         f"| {'/'.join(map(str, s['writer_words']))} "
                         f"| {_num(s['median_words'][0])} vs {_num(s['median_words'][1])} "
                         f"| {s['n_shared']} |")
    lines += ["", "Each fixed writer demo, read (knn pools left out): distinct answers its "
              "interpretations gave, how many its long answer states (the normalized answer "
              "occurs in the normalized long answer: one that paraphrases a long reading's "
              "answer counts as not stating it), in how many sentences; an artifact whose demos "
              "another already listed is left out:", "",
              "| artifact | demo question | words | sentences | readings | distinct answers "
              "| answers stated |", "|---|---|---:|---:|---:|---:|---:|"]
    seen = set()
    for r in m["runs"]:
        w = r["writer"]
        key = json.dumps(w["demos"], sort_keys=True)
        if w["status"] != "compiled" or w.get("knn_k") or key in seen:
            continue
        seen.add(key)
        for d in w["demos"]:
            q = str(d["question"]).replace("|", "\\|")
            lines.append(f"| `{w['artifact']}` | {q} | {d['words']} "
                         f"| {d['sentences']} | {d['readings']} | {d['distinct_answers']} "
                         f"| {d['answers_stated']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT, help=f"output stem (default {OUT}.{{md,json}})")
    args = ap.parse_args(argv)
    from ambiqa.fsutil import atomic_write_json, atomic_write_text

    m = measure(ROOT)
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    text = render(m)
    atomic_write_json(out.with_suffix(".json"), m)
    atomic_write_text(out.with_suffix(".md"), text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
