"""Tokens of Diva's passages block, whole vs trimmed to N sentences, and how often the gold
answers stay visible (no LM call; issue 45 item 2).

Over the rows of a stored Diva run (default: compile-v4's zero-shot Diva on ASQA dev, whose
rows keep the question, the pseudo-interpretations and the five kept passages), this renders
the passages block exactly as Diva's verifier, clarify and writer prompts carry it
(``ambiqa.programs.base.format_passages``, word budget included) from the whole passages and
from the passages trimmed as ``trim_sentences=N`` would show them (``ambiqa.programs.trim``,
queries = the question and the pseudo-interpretations, the real default encoder
all-MiniLM-L6-v2), for N = 1, 2, 3, and counts:

* tokens of the block under the embedded model's own tokenizer: its vocabulary and merges are
  read from the GGUF header (a few MB; no weights, no LM started) into a byte-level BPE with
  Qwen2's pre-tokenizer (``gguf_tokenizer``); where that cannot be loaded, whitespace words
  are counted instead and the report says so. Words are always counted too.
* the tokens of passages Diva's prompts would read per question: the block times the prompts
  that carry it in that row (one per verification vote, plus clarify and the writer on the RAG
  path), as the row's trace recorded them.
* answer retention: a row keeps its answers when every gold short answer string (ASQA dev
  ``qa_pairs``' ``short_answers``) found in the whole block (case-insensitive substring) is
  still found in the trimmed block. Rows with no gold answer in the whole block count as kept
  and are shown apart. This is the cheap proxy only: whether the *answers* stay the same
  needs a paired LM run.

    python -m benchmarks.trim_tokens [RUN_DIR] [--sentences 1 2 3]

Writes ``benchmarks/results/trim-tokens/trim_tokens.json`` and ``.md`` (temp file + rename).
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
from pathlib import Path
from typing import Any, BinaryIO

from ambiqa.fsutil import atomic_write_json, atomic_write_text
from ambiqa.programs.base import format_passages
from ambiqa.programs.trim import trim_passages
from ambiqa.types import Passage

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_RUN = RESULTS / "compile-v4" / "runs" / "diva-zeroshot"
OUT = RESULTS / "trim-tokens" / "trim_tokens"
COMMAND = "nice -n 19 python -m benchmarks.trim_tokens"
DATASET = "asqa:dev"

#: Qwen2's pre-tokenizer split (its tokenizer.json; llama.cpp's "qwen2" pre-tokenizer)
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


# ---- the embedded model's tokenizer, from the GGUF header -----------------------------------
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def _read(fh: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = fh.read(size)
    if len(data) != size:
        raise ValueError("truncated GGUF header")
    return struct.unpack(fmt, data)[0]


def _string(fh: BinaryIO) -> str:
    return fh.read(_read(fh, "<Q")).decode("utf-8", errors="replace")


def _value(fh: BinaryIO, kind: int, keep: bool) -> Any:
    if kind == _STRING:
        return _string(fh)
    if kind == _ARRAY:
        inner, count = _read(fh, "<I"), _read(fh, "<Q")
        if inner in _SCALARS and not keep:  # skip numeric arrays we do not need
            fh.seek(count * struct.calcsize(_SCALARS[inner]), 1)
            return None
        return [_value(fh, inner, keep) for _ in range(count)]
    return _read(fh, _SCALARS[kind])


def gguf_metadata(path: Path, wanted: frozenset[str]) -> dict[str, Any]:
    """The ``wanted`` key-value pairs of a GGUF file's header (format v2/v3); tensors are
    never read."""
    out: dict[str, Any] = {}
    with open(path, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version = _read(fh, "<I")
        if version < 2:
            raise ValueError(f"GGUF version {version} is not supported")
        _read(fh, "<Q")  # tensor count
        for _ in range(_read(fh, "<Q")):
            key, kind = _string(fh), _read(fh, "<I")
            value = _value(fh, kind, key in wanted)
            if key in wanted:
                out[key] = value
            if len(out) == len(wanted):
                break
    return out


def gguf_tokenizer(path: Path) -> Any:
    """A ``tokenizers.Tokenizer`` equal to the GGUF's own byte-level BPE (GPT-2 style model,
    Qwen2 pre-tokenizer): its vocabulary and merges, as llama.cpp reads them."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    meta = gguf_metadata(path, frozenset({"tokenizer.ggml.model", "tokenizer.ggml.pre",
                                          "tokenizer.ggml.tokens", "tokenizer.ggml.merges"}))
    if meta.get("tokenizer.ggml.model") != "gpt2" or meta.get("tokenizer.ggml.pre") != "qwen2":
        raise ValueError(f"not a Qwen2 byte-level BPE: model {meta.get('tokenizer.ggml.model')!r}"
                         f", pre {meta.get('tokenizer.ggml.pre')!r}")
    vocab = {tok: i for i, tok in enumerate(meta["tokenizer.ggml.tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def load_counter() -> tuple[Any, str]:
    """(count(text) -> int, what it counts): the embedded model's tokens, else words."""
    try:
        from ambiqa.lm.models import DEFAULT_MODEL, assemble_model

        path = assemble_model(DEFAULT_MODEL)
        tok = gguf_tokenizer(path)
        sample = "The first iPhone was released on June 29, 2007 – in the U.S."
        if tok.decode(tok.encode(sample).ids) != sample:
            raise ValueError("the tokenizer does not round-trip a sample")
    except Exception as exc:  # noqa: BLE001 - any failure means: count words instead
        return (lambda text: len(text.split())), f"whitespace words ({exc})"
    return (lambda text: len(tok.encode(text).ids)), (
        f"{DEFAULT_MODEL} tokens (BPE vocabulary and merges read from {path.name})")


# ---- the measurement ------------------------------------------------------------------------
def gold_answers(example: dict[str, Any]) -> list[str]:
    """Every distinct short answer string of the example's qa_pairs."""
    seen: dict[str, None] = {}
    for pair in example.get("qa_pairs") or []:
        for ans in pair.get("short_answers") or []:
            if str(ans).strip():
                seen.setdefault(str(ans).strip(), None)
    return list(seen)


def present(answers: list[str], block: str) -> set[str]:
    low = block.lower()
    return {a for a in answers if a.lower() in low}


def measure(rows: list[dict[str, Any]], examples: dict[str, dict[str, Any]], encoder: Any,
            count: Any, sentences: list[int]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        pred = row["prediction"]
        passages = [Passage(p["id"], p["title"], p["text"], p.get("score", 0.0))
                    for p in pred["passages"]]
        queries = [row["question"], *pred.get("pseudo_interpretations", [])]
        answers = gold_answers(examples[row["id"]])
        whole = format_passages(passages)
        found = present(answers, whole)
        prompts = len(pred.get("votes") or []) + (2 if pred.get("path") == "rag" else 0)
        item = {"id": row["id"], "passages": len(passages), "prompts_with_block": prompts,
                "answers": len(answers), "answers_in_whole": len(found),
                "whole": {"tokens": count(whole), "words": len(whole.split())}}
        for n in sentences:
            block = format_passages(trim_passages(passages, queries, encoder, n))
            seen = present(answers, block)
            kept = found & seen
            item[f"n{n}"] = {"tokens": count(block), "words": len(block.split()),
                             "answers_kept": len(kept),
                             "lost": sorted(found - kept),
                             "gained": sorted(seen - found),
                             "kept_all": kept == found}
        out.append(item)
    return out


def _mean(xs: list[float]) -> float:
    return float(statistics.fmean(xs)) if xs else 0.0


def summarize(items: list[dict[str, Any]], sentences: list[int]) -> dict[str, Any]:
    with_answers = [it for it in items if it["answers_in_whole"]]

    def side(key: str) -> dict[str, Any]:
        toks = [it[key]["tokens"] for it in items]
        per_q = [it[key]["tokens"] * it["prompts_with_block"] for it in items]
        out = {"tokens_mean": _mean(toks), "tokens_median": float(statistics.median(toks)),
               "words_mean": _mean([it[key]["words"] for it in items]),
               "prompt_passage_tokens_per_question": _mean(per_q)}
        if key != "whole":
            out["answers_kept"] = sum(it[key]["answers_kept"] for it in items)
            out["rows_kept_all"] = sum(it[key]["kept_all"] for it in with_answers)
            out["answers_gained"] = sum(len(it[key]["gained"]) for it in items)
        return out

    whole = side("whole")
    summary = {"rows": len(items), "rows_with_answer_in_whole": len(with_answers),
               "answers_in_whole": sum(it["answers_in_whole"] for it in items),
               "whole": whole}
    for n in sentences:
        s = side(f"n{n}")
        s["token_ratio"] = s["tokens_mean"] / whole["tokens_mean"] if whole["tokens_mean"] else 0
        summary[f"n{n}"] = s
    return summary


def render(report: dict[str, Any]) -> str:
    s = report["summary"]
    rows_a, ans = s["rows_with_answer_in_whole"], s["answers_in_whole"]
    lines = [
        "# Passages block: whole vs trimmed to N sentences (no LM call)",
        "",
        f"Run `{report['run']}` ({s['rows']} rows, Diva zero-shot, ASQA dev); gold answers "
        f"from `{DATASET}`. Counted: {report['counter']}. Encoder: {report['encoder']}. "
        "Trim queries: the question and its pseudo-interpretations (as Diva's "
        "`trim_sentences`).",
        "",
        "| passages shown | tokens / block (mean) | median | vs whole | words / block | "
        "passage tokens / question (all prompts) | rows keeping every answer | "
        "answers kept | answers gained |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    w = s["whole"]
    lines.append(f"| whole | {w['tokens_mean']:.0f} | {w['tokens_median']:.0f} | 1.00 | "
                 f"{w['words_mean']:.0f} | {w['prompt_passage_tokens_per_question']:.0f} | "
                 f"{rows_a} / {rows_a} | {ans} / {ans} | |")
    for n in report["sentences"]:
        t = s[f"n{n}"]
        lines.append(
            f"| N = {n} | {t['tokens_mean']:.0f} | {t['tokens_median']:.0f} | "
            f"{t['token_ratio']:.2f} | {t['words_mean']:.0f} | "
            f"{t['prompt_passage_tokens_per_question']:.0f} | {t['rows_kept_all']} / {rows_a} | "
            f"{t['answers_kept']} / {ans} | {t['answers_gained']} |")
    lost = {n: [(it["id"], it[f"n{n}"]["lost"]) for it in report["rows"]
                if it[f"n{n}"]["lost"]] for n in report["sentences"]}
    lines += [
        "",
        f"Rows keeping every answer: of the {rows_a} rows with at least one gold short answer "
        "string in the whole block (case-insensitive substring), those where every such "
        f"string is still in the trimmed block ({s['rows'] - rows_a} rows have none and are "
        "left out). Passage tokens / question: the block times the prompts that carried it "
        "in that row (one per verification vote, plus clarify and writer on the RAG path). "
        "Answers gained: strings visible only after trimming -- the whole block is held to "
        "the passage word budget (`format_passages`, 120 words by default), so a kept "
        "sentence from past that cut can show an answer the whole block did not.",
        "",
        "This is a proxy: an answer still visible is not an answer still given. Whether "
        "Diva's answers stay the same needs a paired LM run (whole vs trimmed, same "
        "questions).",
        "",
        "Answers lost per N (row id: strings):",
        "",
    ]
    for n, items in lost.items():
        shown = "; ".join(f"{rid}: {', '.join(strs)}" for rid, strs in items) or "none"
        lines.append(f"* N = {n}: {shown}")
    lines += ["", f"Reproduce: `{report['command']}`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", type=Path, default=DEFAULT_RUN,
                    help="a Diva run directory with results.jsonl")
    ap.add_argument("--sentences", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--out", type=Path, default=OUT, help="output path without suffix")
    args = ap.parse_args(argv)
    from ambiqa.data import load_dataset
    from ambiqa.retrieval.encoder import get_encoder

    rows = [json.loads(line) for line in
            (args.run / "results.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    rows = [r for r in rows if not r.get("error") and r.get("prediction")]
    examples = {str(e["id"]): dict(e) for e in load_dataset(DATASET)}
    count, counter = load_counter()
    encoder = get_encoder()
    items = measure(rows, examples, encoder, count, args.sentences)
    try:
        run = str(args.run.resolve().relative_to(ROOT))
    except ValueError:
        run = str(args.run)
    command = COMMAND + ("" if args.run.resolve() == DEFAULT_RUN else f" {run}") + (
        "" if args.sentences == [1, 2, 3] else
        " --sentences " + " ".join(map(str, args.sentences)))
    report = {"run": run, "dataset": DATASET, "counter": counter,
              "encoder": getattr(encoder, "name", type(encoder).__name__),
              "sentences": args.sentences, "command": command,
              "summary": summarize(items, args.sentences), "rows": items}
    atomic_write_json(args.out.with_suffix(".json"), report)
    atomic_write_text(args.out.with_suffix(".md"), render(report))
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
