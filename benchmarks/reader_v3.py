"""Reader v3 on the yardstick that exposes the ceiling (issue 34, item 1).

Reads the ASQA dev *reference* long answers -- written by the annotators to state every short
answer -- with each extractive reader and reports, side by side:

* D-F1 on the reference long answers (mean over annotators, then questions; 95% BCa interval),
  and the paired difference to the old reader (``extractive:minilm-asqa-v2``, whose
  per-question reads are stored in ``benchmarks/results/reader-human/minilm-asqa-v2.json``);
* beside it, the share of short answers those references state (STR-EM of the references:
  reader-free, the most an exact-span reader could recover) and the reader's token F1 on the
  pairs whose answer the reference does state (how much of the ceiling it reaches);
* how often it abstains on an answerable pair (the answer is in the long answer) and when the
  answer is absent;
* its choice figure on the training holdout (the long answers of the last 50 ASQA *training*
  questions; ASQA dev only reports);
* ms per question on 2 torch threads: all 200 questions' reads timed as they run, and a
  separate timing on the first ``--speed-n`` questions (after a warm-up) for the reader and for
  an all-mpnet-base-v2 span reader of the same window settings (an untrained head costs the
  same as a trained one), with the machine's load average at the time.

Every reader is a STAND-IN for the ASQA paper's RoBERTa-large SQuAD 2.0 D-F1 reader.

    python -m benchmarks.reader_v3 --reader ~/.cache/ambiqa/readers/minilm-asqa-v3
    python -m benchmarks.reader_v3 --report-only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ambiqa.fsutil import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "benchmarks/results/reader-v3"
OLD = ROOT / "benchmarks/results/reader-human/minilm-asqa-v2.json"


def _reader_module() -> Any:
    """benchmarks/reader.py, for its cached human check and holdout check."""
    from benchmarks import reader

    return reader


def reference_ceiling(dev: list[Any]) -> dict[str, Any]:
    """STR-EM of the reference long answers (mean over annotators, then questions) and, per
    (long answer, pair) in ``build_examples`` order, whether the reference states the pair."""
    from ambiqa.evaluation.metrics import str_em

    per_q = []
    for ex in dev:
        scores = [str_em(str(la), list(ex.qa_pairs)) for la in (ex.long_answers or [])
                  if str(la).strip()]
        if scores and ex.qa_pairs:
            per_q.append(statistics.fmean(scores))
    return {"per_question_str_em": [round(v, 4) for v in per_q]}


def stated_pairs(dev: list[Any]) -> list[bool]:
    """For each answerable reader example of ``build_examples(dev)`` (the pairs behind
    ``per_pair_f1``), whether the reference states the answer (STR-EM's substring test)."""
    from ambiqa.evaluation.metrics import str_em
    from ambiqa.reader_training import build_examples

    examples, _ = build_examples(dev)
    return [str_em(e.context, [{"short_answers": e.aliases}]) > 0
            for e in examples if e.answer_start is not None]


def time_reader(model: Any, tokenizer: Any, dev: list[Any], n: int, cfg: dict[str, Any]
                ) -> dict[str, Any]:
    """ms per question reading the references of the first ``n`` questions (after 2 warm-up
    questions), the code path of ``ExtractiveReader.answer_with_scores``."""
    import inspect

    import torch

    from ambiqa.evaluation.extractive import best_span, pad_batch, windows

    uses_types = "token_type_ids" in inspect.signature(model.forward).parameters

    def read(ex: Any) -> int:
        reads = 0
        for la in ex.long_answers or []:
            for pair in ex.qa_pairs or []:
                wins = windows(tokenizer, str(pair["question"]), str(la),
                               max_length=cfg["max_length"], doc_stride=cfg["doc_stride"],
                               max_question_tokens=cfg["max_question_tokens"])
                starts: list[Any] = []
                ends: list[Any] = []
                with torch.inference_mode():
                    for i in range(0, len(wins), 16):
                        batch = pad_batch(wins[i:i + 16], tokenizer.pad_token_id)
                        if not uses_types:  # MPNet has no token types
                            batch.pop("token_type_ids")
                        out = model(**batch)
                        starts += list(out.start_logits)
                        ends += list(out.end_logits)
                best_span(wins, starts, ends, str(la))
                reads += 1
        return reads

    for ex in dev[:2]:
        read(ex)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    c0 = time.process_time()
    reads = sum(read(ex) for ex in dev[:n])
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {"n_questions": n, "reads": reads,
            "ms_per_question": round(1000 * elapsed / max(1, n), 1),
            "ms_per_read": round(1000 * elapsed / max(1, reads), 2),
            # CPU time over the threads: on a machine shared with other jobs the wall clock
            # waits for the cores; CPU-ms / threads is what an idle 2-core machine would take
            "cpu_ms_per_question": round(1000 * cpu / max(1, n), 1),
            "load_avg_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
            "torch_threads": torch.get_num_threads()}


def speed(reader_dir: Path, mpnet_dir: Path | None, dev: list[Any], n: int) -> dict[str, Any]:
    """Back-to-back timings of the reader and (if given) an mpnet span reader."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from ambiqa.evaluation.extractive import ExtractiveReader

    reader = ExtractiveReader(reader_dir)
    cfg = {"max_length": reader.max_length, "doc_stride": reader.doc_stride,
           "max_question_tokens": reader.max_question_tokens}
    out = {reader.name: time_reader(reader.model, reader.tokenizer, dev, n, cfg)}
    if mpnet_dir is not None:
        hf_logging.set_verbosity_error()
        tok = AutoTokenizer.from_pretrained(mpnet_dir, local_files_only=True)
        model = AutoModelForQuestionAnswering.from_pretrained(mpnet_dir, local_files_only=True)
        model.eval()
        out["all-mpnet-base-v2 (span head, untrained)"] = {
            **time_reader(model, tok, dev, n, {**cfg, "max_length": min(cfg["max_length"],
                                                                        512)}),
            "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1)}
        out[reader.name]["params_m"] = round(sum(p.numel() for p in reader.model.parameters())
                                             / 1e6, 1)
        # the reader again, after mpnet: the load may have moved between the two
        out[reader.name + " (again)"] = time_reader(reader.model, reader.tokenizer, dev, n,
                                                    cfg)
    return out


def abstention_curve(reader: Any, dev: list[Any]) -> dict[str, Any]:
    """Error analysis (reported, never used to choose): every answerable dev pair read once
    with its span-minus-null margin, then D-F1 on the references and the abstention rate at the
    calibrated null threshold and at the thresholds that abstain on 10%, 5% and 0% of the
    answerable pairs; and what the abstained pairs' best spans would have scored."""
    from ambiqa.evaluation.metrics import token_f1

    per_q: list[list[list[tuple[float, float, bool]]]] = []
    for ex in dev:
        refs = []
        for la in ex.long_answers or []:
            if not str(la).strip():
                continue
            items = []
            for pair in ex.qa_pairs or []:
                text, best, null = reader.answer_with_scores(str(pair["question"]), str(la))
                # answer_with_scores applied the calibrated threshold; re-derive the span
                saved = reader.null_threshold
                if not text:
                    reader.null_threshold = float("-inf")
                    text, best, null = reader.answer_with_scores(str(pair["question"]), str(la))
                    reader.null_threshold = saved
                stated = any(a and a.lower() in str(la).lower() for a in pair["short_answers"])
                items.append((best - null, token_f1(text, pair["short_answers"]), stated))
            refs.append(items)
        if refs and ex.qa_pairs:
            per_q.append(refs)

    def at(th: float) -> dict[str, float]:
        d = [statistics.fmean(statistics.fmean(f if m > th else 0.0 for m, f, _ in items)
                              for items in refs) for refs in per_q]
        stated = [(m, f) for refs in per_q for items in refs for m, f, st in items if st]
        absd = [f for m, f in stated if m <= th]
        return {"threshold": round(th, 4), "d_f1": round(statistics.fmean(d), 4),
                "abstain_stated": round(len(absd) / max(1, len(stated)), 4),
                "abstained_best_span_f1": round(statistics.fmean(absd), 4) if absd else None}

    margins = sorted(m for refs in per_q for items in refs for m, _, st in items if st)
    out = {"calibrated": at(reader.null_threshold)}
    for share in (0.10, 0.05):
        out[f"abstain_{int(share * 100)}pct"] = at(margins[int(share * len(margins))] - 1e-6)
    out["never_abstain"] = at(float("-inf"))
    return out


def _ci(values: list[float]) -> dict[str, Any]:
    from ambiqa.evaluation.stats import metric_interval

    lo, hi, _ = metric_interval("d-f1", [values])
    return {"n": len(values), "mean": round(statistics.fmean(values), 4),
            "ci95": [round(lo, 4), round(hi, 4)]}


def paired(new: list[float], old: list[float]) -> dict[str, Any]:
    from ambiqa.evaluation.stats import paired_interval

    lo, hi, method = paired_interval("d-f1", [new], [old])
    return {"n": len(new), "diff": round(statistics.fmean(new) - statistics.fmean(old), 4),
            "ci95": [round(lo, 4), round(hi, 4)], "method": method}


def summarize(name: str, human: dict[str, Any], stated: list[bool],
              holdout_long: dict[str, Any] | None, manifest: dict[str, Any] | None
              ) -> dict[str, Any]:
    f1 = human["per_pair_f1"]
    on_stated = [v for v, s in zip(f1, stated, strict=True) if s]
    return {"reader": name, "d_f1": human["d_f1"],
            "answerable_f1": human["answerable_em_f1"],
            "f1_on_stated_pairs": _ci(on_stated) if on_stated else None,
            "abstained_answerable": human["answerable_abstained"],
            "abstained_absent": human["no_answer_abstained"],
            "n_absent": human["n_no_answer"],
            "ms_per_question_all": human["ms_per_question"],
            "holdout_long": holdout_long,
            "training": None if manifest is None else {
                "examples": manifest.get("examples"), "steps": manifest.get("steps"),
                "epochs_done": manifest.get("epochs_done"),
                "null_threshold": (manifest.get("calibration") or {}).get("null_threshold"),
                "calibration": manifest.get("calibration"),
                "trained_on": {k: v for k, v in (manifest.get("trained_on") or {}).items()
                               if k != "history"},
                "holdout_history": (manifest.get("trained_on") or {}).get("history"),
                "weights_sha256": (manifest.get("weights") or {}).get("sha256"),
                "command": manifest.get("command")}}


def _fmt(c: dict[str, Any] | None) -> str:
    if not c:
        return "–"
    return f"{c['mean']:.3f} [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]"


def render(res: dict[str, Any]) -> str:
    ceil = res["reference_str_em"]
    lines = [
        "# The extractive D-F1 readers on the ASQA dev reference long answers",
        "",
        *([f"Command: `{res['command']}`", ""] if res.get("command") else []),
        "Every reader here is a STAND-IN for the ASQA paper's RoBERTa-large SQuAD 2.0 reader.",
        f"ASQA dev, {ceil['n']} questions; the references state {ceil['mean']:.3f} "
        f"[{ceil['ci95'][0]:.3f}, {ceil['ci95'][1]:.3f}] of their short answers (STR-EM of "
        "the references, reader-free): the ceiling an exact-span reader meets.",
        "",
        "| reader | D-F1 on reference long answers [95% CI] | token F1, answerable pairs | "
        "token F1, pairs the reference states | abstains: answerable / absent | "
        "holdout long answers: SQuAD2 F1 (training split) | ms/question (all 200, as read) |",
        "|---|---|---|---|---|---|---:|",
    ]
    for r in res["readers"]:
        h = r.get("holdout_long") or {}
        lines.append(
            f"| `{r['reader']}` | {_fmt(r['d_f1'])} | {_fmt(r['answerable_f1'])} | "
            f"{_fmt(r['f1_on_stated_pairs'])} | {r['abstained_answerable']:.3f} / "
            f"{r['abstained_absent']:.3f} (n={r['n_absent']}) | "
            f"{h.get('overall_f1', '–')} | {r['ms_per_question_all']} |")
    lm = res.get("lm_reader")
    if lm:
        lines.append(
            f"| `{lm['reader']}` (first {lm['n']} questions) | {_fmt(lm['d_f1'])} | – | – | "
            f"{lm.get('abstained_answerable', '–')} / – | – | {lm['ms_per_question']} |")
        tokens = ("tokens not recorded" if lm.get("input_tokens_per_question") is None else
                  f"{lm['input_tokens_per_question']} input + "
                  f"{lm['output_tokens_per_question']} output tokens")
        lm_cost = (f"LM reader cost: {lm['lm_calls_per_question']} LM calls per question, "
                   f"{tokens}, {lm['ms_per_question'] / 1000:.1f} s on 2 cores "
                   f"(`{lm['command']}`); the extractive readers make no LM call.")
        vs = lm.get("against")
        if vs and "paired_diff" in vs:
            lm_cost += (f" On the same {lm['n']} questions `{vs['reader']}` reads "
                        f"{vs['d_f1_same_questions']:.3f}: LM reader − it "
                        f"{vs['paired_diff']:+.3f} [{vs['ci95'][0]:+.3f}, {vs['ci95'][1]:+.3f}].")
    else:
        lm_cost = ""
    if lm_cost:
        lines += ["", lm_cost]
    lines += ["", "Paired differences (same questions / pairs; paired 95% bootstrap, BCa):", ""]
    for name, p in res.get("paired", {}).items():
        lines.append(f"- {name}: {p['diff']:+.3f} [{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}] "
                     f"(n={p['n']})")
    if res.get("speed"):
        lines += ["", "Speed, back to back on the first questions (2 torch threads; the "
                      "machine's 1-minute load average before/after each):", "",
                  "| reader | params (M) | ms/question (wall) | CPU-ms/question ÷ threads | "
                  "ms/read | load avg |",
                  "|---|---:|---:|---:|---:|---|"]
        for name, s in res["speed"].items():
            cpu = s.get("cpu_ms_per_question")
            per_thread = "–" if cpu is None else f"{cpu / max(1, s['torch_threads']):.1f}"
            lines.append(f"| {name} | {s.get('params_m', '')} | {s['ms_per_question']} | "
                         f"{per_thread} | {s['ms_per_read']} | {s['load_avg_1min']} |")
    curve = res.get("abstention_curve")
    if curve:
        lines += ["", f"Abstention error analysis of `{curve['reader']}` on the same dev "
                      "references (reported only; the threshold stays the one calibrated on "
                      "the training holdout):", "",
                  "| null threshold | D-F1 on references | abstains on pairs the reference "
                  "states | best-span F1 of the abstained pairs |", "|---|---:|---:|---:|"]
        for key, c in curve.items():
            if key == "reader":
                continue
            lines.append(f"| {key} ({c['threshold']}) | {c['d_f1']} | {c['abstain_stated']} | "
                         f"{c['abstained_best_span_f1']} |")
    targets = res.get("targets")
    if targets:
        lines += ["", "Targets (issue 34):", ""]
        lines += [f"- {t}" for t in targets]
    lines += ["", *[f"{n}" for n in res.get("notes", [])], ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reader", action="append", default=[],
                   help="reader checkpoint directory (repeatable; the first is the chosen one)")
    p.add_argument("--stored", action="append", default=[], metavar="NAME",
                   help="also show a reader whose reads are stored under "
                        "benchmarks/results/reader-human/NAME*.json (its weights need not be "
                        "here), and pair every --reader with it")
    p.add_argument("--dev", default="asqa:dev")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--speed-n", type=int, default=30)
    p.add_argument("--mpnet", default=None, help="all-mpnet-base-v2 directory (speed only)")
    p.add_argument("--lm-reader", default=None,
                   help="JSON from benchmarks/reader_lm_ceiling.py to show beside (optional)")
    p.add_argument("--note", action="append", default=[])
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--analysis-only", action="store_true",
                   help="add the speed table (CPU time too) and the abstention curve of the "
                        "first --reader to the stored result")
    args = p.parse_args(argv)
    out = Path(args.out)
    stem = out.name if out.name.startswith("reader-v") else "reader-v3"
    res_path = out / f"{stem}.json"
    if args.report_only:
        res = json.loads(res_path.read_text())
        if args.note:
            res["notes"] = args.note
        if args.lm_reader:
            res["lm_reader"] = json.loads(Path(args.lm_reader).read_text())
        atomic_write_json(res_path, res)
        atomic_write_text(out / f"{stem}.md", render(res))
        return 0
    import torch

    from ambiqa.data.specs import load_dataset
    from ambiqa.evaluation.extractive import ExtractiveReader

    torch.set_num_threads(args.threads)
    if args.analysis_only:
        res = json.loads(res_path.read_text())
        dev = load_dataset(args.dev)[:args.limit] if args.limit else load_dataset(args.dev)
        first = Path(args.reader[0]).expanduser()
        res["speed"] = speed(first, Path(args.mpnet) if args.mpnet else None, dev,
                             args.speed_n)
        res["abstention_curve"] = {"reader": f"extractive:{first.name}", **abstention_curve(
            ExtractiveReader(first, threads=args.threads), dev)}
        atomic_write_json(res_path, res)
        atomic_write_text(out / f"{stem}.md", render(res))
        print(render(res))
        return 0
    bench = _reader_module()
    dev = load_dataset(args.dev)
    if args.limit:
        dev = dev[:args.limit]
    ceiling = reference_ceiling(dev)
    stated = stated_pairs(dev)
    old = json.loads(OLD.read_text())
    old_ids = old["key"]["ids"]
    ids = [str(e.id) for e in dev]
    readers = []
    per_q: dict[str, list[float]] = {}
    per_pair: dict[str, list[float]] = {}
    if old_ids[:len(ids)] == ids:
        oh = old["human"]
        n_pairs = len(stated)
        oh = {**oh, "per_question_d_f1": oh["per_question_d_f1"][:len(ids)],
              "per_pair_f1": oh["per_pair_f1"][:n_pairs]}
        if args.limit:
            oh["d_f1"] = _ci(oh["per_question_d_f1"])
            oh["answerable_em_f1"] = _ci(oh["per_pair_f1"])
        readers.append(summarize(old["key"]["reader"], oh, stated, json.loads(
            (OLD.parent / "minilm-asqa-v2-holdout50-long.json").read_text())["holdout"], None))
        per_q["old"], per_pair["old"] = oh["per_question_d_f1"], oh["per_pair_f1"]
    stored_names = []
    for name in args.stored:
        rec = json.loads((OLD.parent / f"{name}.json").read_text())
        if rec["key"]["ids"] != ids or rec["key"]["limit"] != args.limit:
            raise SystemExit(f"--stored {name}: its reads are of other questions")
        held = json.loads((OLD.parent / f"{name}-holdout50-long.json").read_text())["holdout"]
        readers.append(summarize(rec["key"]["reader"], rec["human"], stated, held, None))
        per_q[rec["key"]["reader"]] = rec["human"]["per_question_d_f1"]
        per_pair[rec["key"]["reader"]] = rec["human"]["per_pair_f1"]
        stored_names.append(rec["key"]["reader"])
    for path in args.reader:
        reader = ExtractiveReader(Path(path).expanduser(), threads=args.threads)
        print(f"reading the references with {reader.name}…", flush=True)
        human = bench.human_check_cached(reader, dev, args.dev, args.limit)
        held = bench.holdout_long_answers_cached(reader, 50)
        readers.append(summarize(reader.name, human, stated, held, reader.manifest))
        per_q[reader.name] = human["per_question_d_f1"]
        per_pair[reader.name] = human["per_pair_f1"]
    res: dict[str, Any] = {
        "dev": args.dev, "limit": args.limit, "n_questions": len(dev),
        "reference_str_em": _ci(ceiling["per_question_str_em"]),
        "pairs_stated_share": round(sum(stated) / max(1, len(stated)), 4),
        "readers": readers, "paired": {}, "notes": args.note,
        "command": "python -m benchmarks.reader_v3 " + " ".join(sys.argv[1:] if argv is None
                                                                else argv)}
    if "old" in per_q:
        for r in readers[1:]:
            res["paired"][f"D-F1 {r['reader']} − {readers[0]['reader']}"] = paired(
                per_q[r["reader"]], per_q["old"])
            res["paired"][f"token F1 (answerable pairs) {r['reader']} − "
                          f"{readers[0]['reader']}"] = paired(per_pair[r["reader"]],
                                                              per_pair["old"])
    for r in readers:
        if r["reader"] in stored_names or r["reader"] not in per_q or r is readers[0]:
            continue
        for other in stored_names:
            res["paired"][f"D-F1 {r['reader']} − {other}"] = paired(per_q[r["reader"]],
                                                                    per_q[other])
            res["paired"][f"token F1 (answerable pairs) {r['reader']} − {other}"] = paired(
                per_pair[r["reader"]], per_pair[other])
    if args.speed_n and args.reader:
        res["speed"] = speed(Path(args.reader[0]).expanduser(),
                             Path(args.mpnet) if args.mpnet else None, dev, args.speed_n)
    if args.lm_reader:
        res["lm_reader"] = json.loads(Path(args.lm_reader).read_text())
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(res_path, res)
    atomic_write_text(out / f"{stem}.md", render(res))
    print(render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
