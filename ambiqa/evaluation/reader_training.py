"""``ambiqa reader train``: fine-tune an extractive SQuAD 2.0-style reader on ASQA training data.

Examples come from training splits only (a dev/test spec is refused): for every ASQA training
question, each annotator's long answer is a context and each disambiguated question
(``qa_pairs``) is a question; the pair's short answer is located in the long answer as a span
(:func:`ambiqa.evaluation.extractive.locate_answer`, alias match on SQuAD-normalised text,
mapped back to character offsets). When no alias occurs, the example becomes a SQuAD 2.0
no-answer example (the label points at ``[CLS]``), which teaches the reader to abstain when a
long answer leaves an interpretation out -- exactly the case D-F1 must score 0.

The encoder is the packaged all-MiniLM-L6-v2 (or any local BERT-style directory) with a new
span head (``AutoModelForQuestionAnswering``), trained by a plain torch loop on CPU.

Resumable after a kill: every ``save_every`` steps the weights and the AdamW moments are written
as safetensors (never pickles) with a JSON progress file under ``<out>/work``; a rerun with the
same configuration resumes from the last save. The data order is a function of (seed, epoch)
and dropout is re-seeded from (seed, step), so a resumed run takes the same steps an unbroken
one would. The finished checkpoint (weights, config, tokenizer) gets ``reader_manifest.json``,
written last: data, example counts, steps, seed, sha256 of the weights, validation scores.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError, ModelError
from ambiqa.evaluation.extractive import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    WEIGHTS_NAME,
    ExtractiveReader,
    Window,
    default_reader_dir,
    locate_answer,
    pad_batch,
    readers_dir,
    windows,
)
from ambiqa.fsutil import atomic_write_json, sha256_file


@dataclass
class ReaderExample:
    """One SQuAD-style example; ``answer_start is None`` marks a no-answer example."""

    qid: str
    question: str
    context: str
    answer: str
    answer_start: int | None
    aliases: list[str]


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")


def remove_sentence(context: str, start: int, end: int) -> str:
    """``context`` without the sentence(s) holding ``[start, end)`` ("" if nothing is left)."""
    bounds = [0, *(m.end() for m in _SENTENCE_END.finditer(context)), len(context)]
    left = max(b for b in bounds if b <= start)
    right = min(b for b in bounds if b >= end)
    return " ".join((context[:left] + " " + context[right:]).split())


def build_examples(records: Sequence[Any], *, removed_negatives: float = 0.0, seed: int = 0
                   ) -> tuple[list[ReaderExample], dict[str, int]]:
    """Reader examples from ASQA-style records (``qa_pairs``, ``long_answers``) and counts.

    One example per (long answer, disambiguated question). Counts: ``questions`` (records),
    ``long_answers``, ``answerable`` (span found), ``no_answer`` (no alias in the long answer).

    ``removed_negatives`` (a share, 0 = none) adds SQuAD 2.0-style no-answer examples of the
    kind D-F1 meets in system outputs: the long answer with the sentence that held the answer
    deleted (kept only when no alias survives elsewhere), counted as ``no_answer_removed``.
    Human long answers almost always cover every interpretation, so without these the reader
    would hardly ever see a long answer that leaves one out.
    """
    out: list[ReaderExample] = []
    counts = {"questions": 0, "long_answers": 0, "answerable": 0, "no_answer": 0,
              "no_answer_removed": 0}
    rng = random.Random(seed)
    for rec in records:
        get = rec.get if isinstance(rec, dict) else (lambda k, d=None, r=rec: getattr(r, k, d))
        pairs = get("qa_pairs") or []
        contexts = [str(c) for c in (get("long_answers") or []) if str(c).strip()]
        counts["questions"] += 1
        counts["long_answers"] += len(contexts)
        rid = str(get("id") or counts["questions"])
        for a, context in enumerate(contexts):
            for p, pair in enumerate(pairs):
                question = str(pair.get("question") or "").strip()
                aliases = [str(x) for x in (pair.get("short_answers") or []) if str(x).strip()]
                if not question or not aliases:
                    continue
                span = locate_answer(context, aliases)
                if span is None:
                    counts["no_answer"] += 1
                    out.append(ReaderExample(f"{rid}/{a}/{p}", question, context, "", None,
                                             aliases))
                else:
                    counts["answerable"] += 1
                    out.append(ReaderExample(f"{rid}/{a}/{p}", question, context,
                                             context[span[0]:span[1]], span[0], aliases))
                    if removed_negatives > 0 and rng.random() < removed_negatives:
                        rest = remove_sentence(context, *span)
                        if rest and locate_answer(rest, aliases) is None:
                            counts["no_answer_removed"] += 1
                            out.append(ReaderExample(f"{rid}/{a}/{p}/removed", question, rest,
                                                     "", None, aliases))
    return out, counts


def _field(rec: Any, key: str, default: Any = None) -> Any:
    return rec.get(key, default) if isinstance(rec, dict) else getattr(rec, key, default)


def build_passage_examples(records: Sequence[Any], *, negatives_per_pair: int = 1,
                           seed: int = 0) -> tuple[list[ReaderExample], dict[str, int]]:
    """Reader examples from ASQA's grounding passages (``gold_passages``: title, text).

    For each disambiguated question, every passage of its ASQA question that contains one of
    the pair's short answers (alias match, as for long answers) is an answerable example; of
    the passages of the same question that contain none of the pair's answers, up to
    ``negatives_per_pair`` (seeded choice) become no-answer examples. These negatives share the
    question's topic, so they teach the reader to abstain on a relevant text that does not
    answer *this* interpretation -- the case D-F1 meets in system long answers.
    Counts: ``answerable``, ``no_answer``, ``pairs`` (pairs with at least one example).
    """
    out: list[ReaderExample] = []
    counts = {"questions": 0, "passages": 0, "pairs": 0, "answerable": 0, "no_answer": 0}
    rng = random.Random(seed)
    for n, rec in enumerate(records):
        rid = str(_field(rec, "id") or n)
        passages = [str(p.get("text") or "") for p in (_field(rec, "gold_passages") or [])
                    if isinstance(p, dict) and str(p.get("text") or "").strip()]
        counts["questions"] += 1
        counts["passages"] += len(passages)
        for k, pair in enumerate(_field(rec, "qa_pairs") or []):
            question = str(pair.get("question") or "").strip()
            aliases = [str(x) for x in (pair.get("short_answers") or []) if str(x).strip()]
            if not question or not aliases:
                continue
            misses = []
            made = 0
            for j, text in enumerate(passages):
                span = locate_answer(text, aliases)
                if span is None:
                    misses.append((j, text))
                    continue
                made += 1
                counts["answerable"] += 1
                out.append(ReaderExample(f"{rid}/passage{j}/{k}", question, text,
                                         text[span[0]:span[1]], span[0], aliases))
            for j, text in rng.sample(misses, min(negatives_per_pair, len(misses))):
                made += 1
                counts["no_answer"] += 1
                out.append(ReaderExample(f"{rid}/passage{j}/{k}/none", question, text, "",
                                         None, aliases))
            counts["pairs"] += made > 0
    return out, counts


def build_hotpot_examples(records: Sequence[Any], *, seed: int = 0
                          ) -> tuple[list[ReaderExample], dict[str, int]]:
    """Reader examples from HotpotQA records (``contexts``: title, text, is_supporting).

    Each supporting paragraph that contains the answer is an answerable example; one seeded
    distractor paragraph (not supporting, no answer in it) per question is a no-answer example.
    Yes/no questions are skipped: their answer is not a span. Counts: ``answerable``,
    ``no_answer``, ``skipped_yes_no``.
    """
    out: list[ReaderExample] = []
    counts = {"questions": 0, "answerable": 0, "no_answer": 0, "skipped_yes_no": 0}
    rng = random.Random(seed)
    for n, rec in enumerate(records):
        rid = str(_field(rec, "id") or n)
        question = str(_field(rec, "question") or "").strip()
        answer = str(_field(rec, "answer") or "").strip()
        counts["questions"] += 1
        if answer.lower() in {"yes", "no"}:
            counts["skipped_yes_no"] += 1
            continue
        if not question or not answer:
            continue
        paras = [p for p in (_field(rec, "contexts") or []) if isinstance(p, dict)
                 and str(p.get("text") or "").strip()]
        distractors = []
        for j, para in enumerate(paras):
            text = str(para["text"])
            span = locate_answer(text, [answer])
            if para.get("is_supporting") and span is not None:
                counts["answerable"] += 1
                out.append(ReaderExample(f"{rid}/{j}", question, text,
                                         text[span[0]:span[1]], span[0], [answer]))
            elif not para.get("is_supporting") and span is None:
                distractors.append((j, text))
        if distractors:
            j, text = rng.choice(distractors)
            counts["no_answer"] += 1
            out.append(ReaderExample(f"{rid}/{j}/none", question, text, "", None, [answer]))
    return out, counts


def training_examples(cfg: TrainConfig, limit: int | None = None
                      ) -> tuple[list[ReaderExample], dict[str, Any]]:
    """All training examples ``cfg`` asks for, and counts per source.

    Sources: ``long_answers`` (always, from ``cfg.train``), ``asqa_passages`` (if
    ``cfg.asqa_passages``: the grounding passages of the same training questions) and
    ``hotpotqa`` (if ``cfg.hotpotqa`` names a HotpotQA training split). The last
    ``cfg.holdout`` questions of ``cfg.train`` are left out of every source: they are the
    training-split validation set (:func:`holdout_examples`). Every split must be a training
    split; evaluation data is refused.
    """
    from ambiqa.data.specs import is_training_split, load_dataset

    for spec in (cfg.train, cfg.hotpotqa):
        if spec and not is_training_split(spec):
            raise ConfigError(f"refusing to train the reader on evaluation data '{spec}'",
                              hint="use training splits, e.g. asqa:train, hotpotqa:train")
    records = list(load_dataset(cfg.train))
    if limit:
        records = records[:limit]
    if cfg.holdout:
        records = records[:-cfg.holdout] if cfg.holdout < len(records) else []
    examples, counts = build_examples(records, removed_negatives=cfg.removed_negatives,
                                      seed=cfg.seed)
    per_source: dict[str, Any] = {**counts, "long_answers_source": dict(counts)}
    if cfg.asqa_passages:
        extra, c = build_passage_examples(records, seed=cfg.seed)
        examples += extra
        per_source["asqa_passages"] = c
    if cfg.hotpotqa:
        hot = list(load_dataset(cfg.hotpotqa))
        if limit:
            hot = hot[:limit]
        extra, c = build_hotpot_examples(hot, seed=cfg.seed)
        examples += extra
        per_source["hotpotqa"] = c
    return examples, per_source


def holdout_examples(cfg: TrainConfig) -> list[ReaderExample]:
    """The training-split validation examples: the grounding-passage examples of the last
    ``cfg.holdout`` questions of ``cfg.train`` (never trained on by a reader that set
    ``holdout``). Used to choose the default reader without touching evaluation data."""
    from ambiqa.data.specs import load_dataset

    if not cfg.holdout:
        return []
    records = list(load_dataset(cfg.train))[-cfg.holdout:]
    return build_passage_examples(records, seed=cfg.seed + 1)[0]


def holdout_long_answer_examples(cfg: TrainConfig) -> list[ReaderExample]:
    """The long-answer examples of the same held-out questions (what D-F1 reads), built as
    for training, answer-sentence-removed negatives included. A reader trained without
    ``holdout`` (v1) has seen these questions, which favours it in any comparison."""
    from ambiqa.data.specs import load_dataset

    if not cfg.holdout:
        return []
    records = list(load_dataset(cfg.train))[-cfg.holdout:]
    return build_examples(records, removed_negatives=cfg.removed_negatives,
                          seed=cfg.seed + 1)[0]


def featurize(tokenizer: Any, examples: Sequence[ReaderExample], *, max_length: int,
              doc_stride: int, max_question_tokens: int) -> list[Window]:
    """Training windows with ``meta['start'/'end']`` labels (0 = the null span at [CLS]).

    A window that does not contain the whole answer span is labelled null, as in the SQuAD 2.0
    recipe, so long contexts teach the reader to abstain on windows that miss the answer.
    """
    feats: list[Window] = []
    for ex in examples:
        for w in windows(tokenizer, ex.question, ex.context, max_length=max_length,
                         doc_stride=doc_stride, max_question_tokens=max_question_tokens):
            start = end = 0
            if ex.answer_start is not None:
                a0, a1 = ex.answer_start, ex.answer_start + len(ex.answer)
                s_tok = e_tok = None
                for i in range(w.context_start, w.context_end):
                    off = w.offsets[i]
                    assert off is not None
                    if s_tok is None and off[0] <= a0 < off[1]:
                        s_tok = i
                    if off[0] < a1 <= off[1]:
                        e_tok = i
                if s_tok is not None and e_tok is not None and e_tok >= s_tok:
                    start, end = s_tok, e_tok
            w.meta = {"start": start, "end": end, "qid": ex.qid}
            feats.append(w)
    return feats


def refuse_repo_output(out_dir: Path) -> None:
    """Checkpoints are build products: never write them inside a git checkout's tree.

    A hidden directory at the top of a checkout (``.ambiqa-cache``, git-ignored, where the
    test suite keeps its cache) is allowed, as for ColBERT checkpoints.
    """
    here = out_dir.expanduser().resolve()
    for parent in (here, *here.parents):
        if (parent / ".git").exists():
            rel = here.relative_to(parent)
            if rel.parts and rel.parts[0].startswith("."):
                return
            raise ConfigError(f"refusing to write a reader checkpoint inside the git "
                              f"repository {parent}",
                              hint=f"use the cache (default: {readers_dir()}/<name>) or a "
                                   "directory outside the repository")


def _base_model_path(base: str | Path | None) -> Path:
    if base is not None:
        path = Path(base).expanduser()
        if not (path / "config.json").is_file():
            raise ModelError(f"base encoder not found: {path} (no config.json)",
                             hint="give a local BERT-style model directory, or omit --base "
                                  "for the packaged all-MiniLM-L6-v2")
        return path
    from ambiqa.retrieval.encoder import minilm_path

    return minilm_path()


@dataclass
class TrainConfig:
    """Everything that decides the trained weights (a resume must match it exactly)."""

    train: str = "asqa:train"
    base: str = ""
    epochs: float = 2.0
    max_steps: int = 0  # 0: epochs decide
    batch_size: int = 16
    lr: float = 1e-4
    warmup: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0
    max_length: int = 384
    doc_stride: int = 128
    max_question_tokens: int = 64
    max_answer_tokens: int = 30
    removed_negatives: float = 0.33
    freeze_embeddings: bool = True  # word embeddings stay as pretrained: a third of the
    # weights, most of the optimizer's CPU time, and ~1.7k examples cannot improve them
    asqa_passages: bool = False  # add ASQA's grounding passages as a source
    hotpotqa: str = ""  # a HotpotQA training split to add as a source ("" = none)
    holdout: int = 0  # last N questions of `train` kept out as training-split validation


def _save_state(work: Path, model: Any, optim: Any, progress: dict[str, Any]) -> None:
    """Weights + AdamW moments as safetensors, then the progress JSON (the commit point)."""
    from safetensors.torch import save_file

    from ambiqa.fsutil import atomic_write

    def write(path: Path, tensors: dict[str, Any]) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        save_file(tensors, str(tmp), metadata={"format": "pt"})
        atomic_write(path, lambda fh: fh.write(tmp.read_bytes()), mode="wb")
        tmp.unlink()

    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    write(work / WEIGHTS_NAME, state)
    opt = optim.state_dict()
    tensors = {f"{idx}.{k}": v.detach().reshape(v.shape).contiguous()
               for idx, st in opt["state"].items() for k, v in st.items()}
    write(work / "optimizer.safetensors", tensors)
    progress = {**progress, "weights_sha256": sha256_file(work / WEIGHTS_NAME),
                "optimizer_sha256": sha256_file(work / "optimizer.safetensors"),
                "param_groups": [{k: v for k, v in g.items() if k != "params"}
                                 for g in opt["param_groups"]]}
    atomic_write_json(work / "progress.json", progress)


def _load_state(work: Path, model: Any, optim: Any) -> dict[str, Any] | None:
    """The saved progress if ``work`` holds a complete save (hashes match), else None."""
    from safetensors.torch import load_file

    ppath = work / "progress.json"
    if not ppath.is_file():
        return None
    try:
        progress = json.loads(ppath.read_text(encoding="utf-8"))
        if (sha256_file(work / WEIGHTS_NAME) != progress.get("weights_sha256")
                or sha256_file(work / "optimizer.safetensors")
                != progress.get("optimizer_sha256")):
            return None
    except (OSError, ValueError):
        return None
    model.load_state_dict(load_file(str(work / WEIGHTS_NAME)))
    flat = load_file(str(work / "optimizer.safetensors"))
    state: dict[int, dict[str, Any]] = {}
    for key, val in flat.items():
        idx, _, name = key.partition(".")
        state.setdefault(int(idx), {})[name] = val
    groups = optim.state_dict()["param_groups"]
    for g, saved in zip(groups, progress.get("param_groups") or [], strict=False):
        g.update({k: v for k, v in saved.items() if k != "params"})
    optim.load_state_dict({"state": state, "param_groups": groups})
    return progress


def _lr_factor(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def validate(reader: ExtractiveReader, dev: Sequence[Any], *,
             examples: Sequence[ReaderExample] | None = None) -> dict[str, Any]:
    """Validation scores of a reader on evaluation data (ASQA dev by default).

    ``d_f1_human``: Disambig-F1 when the reader reads the annotators' own long answers (mean
    over annotators, then over questions) -- an upper-bound check of the reader itself.
    ``squad``: EM/F1 on the dev reader examples built like the training ones, split into
    answerable examples and no-answer ones (accuracy of abstaining).
    """
    from ambiqa.evaluation.metrics import exact_match, token_f1

    per_q: list[float] = []
    t0 = time.perf_counter()
    reads = 0
    for rec in dev:
        pairs = list(rec.get("qa_pairs") or [])
        longs = list(rec.get("long_answers") or [])
        scores = []
        for long_answer in longs:
            if not pairs:
                continue
            f1s = [token_f1(reader.answer(str(p["question"]), str(long_answer)),
                            p["short_answers"]) for p in pairs]
            reads += len(pairs)
            scores.append(sum(f1s) / len(f1s))
        if scores:
            per_q.append(sum(scores) / len(scores))
    elapsed = time.perf_counter() - t0
    out: dict[str, Any] = {
        "n_questions": len(per_q),
        "d_f1_human": round(sum(per_q) / len(per_q), 4) if per_q else None,
        "ms_per_read": round(1000 * elapsed / max(1, reads), 2),
        "ms_per_question": round(1000 * elapsed / max(1, len(per_q)), 1),
    }
    if examples:
        ans = [e for e in examples if e.answer_start is not None]
        noans = [e for e in examples if e.answer_start is None]
        preds = {e.qid: reader.answer(e.question, e.context) for e in examples}
        out["squad"] = {
            "answerable": len(ans), "no_answer": len(noans),
            "answerable_em": round(sum(exact_match(preds[e.qid], e.aliases) for e in ans)
                                   / max(1, len(ans)), 4),
            "answerable_f1": round(sum(token_f1(preds[e.qid], e.aliases) for e in ans)
                                   / max(1, len(ans)), 4),
            "answerable_abstained": round(sum(not preds[e.qid] for e in ans)
                                          / max(1, len(ans)), 4),
            "no_answer_accuracy": round(sum(not preds[e.qid] for e in noans)
                                        / max(1, len(noans)), 4),
            # SQuAD 2.0 F1 over all examples: a no-answer example scores 1 when abstained on
            "overall_f1": round((sum(token_f1(preds[e.qid], e.aliases) for e in ans)
                                 + sum(not preds[e.qid] for e in noans))
                                / max(1, len(examples)), 4),
        }
    return out


def train_reader(out_dir: str | Path | None = None, *, config: TrainConfig | None = None,
                 dev: str | None = "asqa:dev", limit: int | None = None,
                 threads: int = 2, save_every: int = 25, max_minutes: float | None = None,
                 fresh: bool = False, log: Callable[[str], None] = print,
                 command: str | None = None, calibration_sample: int = 400
                 ) -> dict[str, Any]:
    """Train (or resume) a reader into ``out_dir``; returns the manifest.

    ``max_minutes`` stops the schedule early at a save point (the manifest records the steps
    actually taken and says the schedule was cut); ``fresh`` discards an earlier partial run.
    """
    cfg = config or TrainConfig()
    from ambiqa.data.specs import is_training_split

    for spec in (cfg.train, cfg.hotpotqa):
        if spec and not is_training_split(spec):
            raise ConfigError(f"refusing to train the reader on evaluation data '{spec}'",
                              hint="use training splits, e.g. --train asqa:train")
    out = Path(out_dir).expanduser() if out_dir is not None else default_reader_dir()
    refuse_repo_output(out)
    if (out / MANIFEST_NAME).is_file() and not fresh and not (out / "work").exists():
        try:
            done = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            done = {}
        if (done.get("config") or {}) == {**asdict(cfg), "base": str(_base_model_path(
                cfg.base or None))} and (done.get("data") or {}).get("limit") == limit:
            log(f"{out} already holds this reader ({done.get('steps')} steps); "
                "add --fresh to train it again")
            return done
        raise ConfigError(f"{out} already holds a reader trained with other options",
                          hint="add --fresh to replace it, or choose another --name/--out")
    base = _base_model_path(cfg.base or None)
    cfg.base = str(base)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(max(1, threads))
    examples, counts = training_examples(cfg, limit)
    if not examples:
        raise ConfigError(f"no reader examples in '{cfg.train}' (no qa_pairs with short "
                          "answers and long answers)")
    log(f"reader examples from {cfg.train}: {counts['answerable']} answerable, "
        f"{counts['no_answer']} no-answer, {counts['no_answer_removed']} no-answer with the "
        f"answer sentence removed ({counts['questions']} questions, "
        f"{counts['long_answers']} long answers)")
    for source in ("asqa_passages", "hotpotqa"):
        if source in counts:
            log(f"reader examples from {source}: {counts[source]['answerable']} answerable, "
                f"{counts[source]['no_answer']} no-answer")
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    feats = featurize(tokenizer, examples, max_length=cfg.max_length,
                      doc_stride=cfg.doc_stride, max_question_tokens=cfg.max_question_tokens)
    steps_per_epoch = math.ceil(len(feats) / cfg.batch_size)
    total = cfg.max_steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))
    warmup = int(cfg.warmup * total)
    torch.manual_seed(cfg.seed)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "qa_outputs newly initialized" is expected: it is new
    try:
        model = AutoModelForQuestionAnswering.from_pretrained(base, local_files_only=True,
                                                              use_safetensors=True)
    finally:
        hf_logging.set_verbosity(verbosity)
    if cfg.freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    no_decay_names = {n for n, _ in model.named_parameters()
                      if n.endswith("bias") or "LayerNorm" in n}
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in trainable if n not in no_decay_names]
    no_decay = [p for n, p in trainable if n in no_decay_names]
    optim = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                               {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr)
    work = out / "work"
    fingerprint = {**asdict(cfg), "limit": limit, "n_features": len(feats), "total": total}
    step = 0
    elapsed_before = 0.0
    if fresh and work.exists():
        shutil.rmtree(work)
    progress = _load_state(work, model, optim) if work.exists() else None
    if progress is not None:
        if progress.get("fingerprint") != fingerprint:
            raise ConfigError(f"{work} holds a partial run with another configuration",
                              hint="rerun with the same options, or add --fresh to start over")
        step = int(progress["step"])
        elapsed_before = float(progress.get("train_s", 0.0))
        log(f"resuming at step {step}/{total} from {work}")
    work.mkdir(parents=True, exist_ok=True)
    model.train()
    t_start = time.perf_counter()
    cut = False
    loss_ema = None
    pad = tokenizer.pad_token_id
    while step < total:
        epoch, pos = divmod(step, steps_per_epoch)
        order = list(range(len(feats)))
        random.Random(cfg.seed * 7919 + epoch).shuffle(order)
        batch = [feats[i] for i in order[pos * cfg.batch_size:(pos + 1) * cfg.batch_size]]
        torch.manual_seed(cfg.seed * 1_000_003 + step)
        inputs = pad_batch(batch, pad)
        inputs["start_positions"] = torch.tensor([w.meta["start"] for w in batch])
        inputs["end_positions"] = torch.tensor([w.meta["end"] for w in batch])
        for g in optim.param_groups:
            g["lr"] = cfg.lr * _lr_factor(step, total, warmup)
        loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad(set_to_none=True)
        step += 1
        value = float(loss.detach())
        loss_ema = value if loss_ema is None else 0.9 * loss_ema + 0.1 * value
        spent = time.perf_counter() - t_start
        over = max_minutes is not None and (elapsed_before + spent) / 60 >= max_minutes
        if step % save_every == 0 or step == total or over:
            _save_state(work, model, optim, {"step": step, "total": total,
                                             "fingerprint": fingerprint,
                                             "train_s": round(elapsed_before + spent, 1),
                                             "loss_ema": round(loss_ema, 4)})
            rate = spent / max(1, step - int(progress["step"] if progress else 0))
            log(f"step {step}/{total} loss~{loss_ema:.3f} {rate:.2f} s/step "
                f"eta {rate * (total - step) / 60:.1f} min (saved)")
        if over and step < total:
            cut = True
            log(f"time budget of {max_minutes} min reached at step {step}/{total}: "
                "finishing with the steps taken")
            break
    train_s = elapsed_before + time.perf_counter() - t_start
    return _finish(out, work, model, tokenizer, cfg, counts, step, total, train_s, cut,
                   steps_per_epoch, len(feats), limit, dev, threads, log, command,
                   calibration_sample)


def _finish(out: Path, work: Path, model: Any, tokenizer: Any, cfg: TrainConfig,
            counts: dict[str, int], step: int, total: int, train_s: float, cut: bool,
            steps_per_epoch: int, n_feats: int, limit: int | None, dev: str | None,
            threads: int, log: Callable[[str], None], command: str | None = None,
            calibration_sample: int = 400) -> dict[str, Any]:
    """Write the final checkpoint and a provisional manifest, then calibrate and validate."""
    from ambiqa.fsutil import atomic_write, atomic_write_text

    manifest_path = out / MANIFEST_NAME
    if manifest_path.exists():
        manifest_path.unlink()  # an older finished reader is being replaced
    atomic_write(out / WEIGHTS_NAME, lambda fh: fh.write((work / WEIGHTS_NAME).read_bytes()),
                 mode="wb")
    model.config.architectures = [type(model).__name__]
    atomic_write_text(out / "config.json", model.config.to_json_string())
    tokenizer.save_pretrained(str(out))
    weights_sha = sha256_file(out / WEIGHTS_NAME)
    manifest: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "name": f"extractive:{out.name}",
        "base_model": cfg.base,
        "data": {"train": cfg.train, "limit": limit, "source": "long answers of the "
                 "annotators x disambiguated questions (qa_pairs); spans by alias match on "
                 "SQuAD-normalised text"
                 + ("; + ASQA training grounding passages" if cfg.asqa_passages else "")
                 + (f"; + {cfg.hotpotqa} paragraphs" if cfg.hotpotqa else ""),
                 "holdout_questions": cfg.holdout},
        "examples": {**counts, "windows": n_feats},
        "config": asdict(cfg),
        "steps": step, "planned_steps": total, "steps_per_epoch": steps_per_epoch,
        "epochs_done": round(step / steps_per_epoch, 3), "schedule_cut": cut,
        "seed": cfg.seed, "threads": threads, "train_s": round(train_s, 1),
        "command": command,
        "weights": {"file": WEIGHTS_NAME, "sha256": weights_sha,
                    "bytes": (out / WEIGHTS_NAME).stat().st_size},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "validation": None,
    }
    # A provisional manifest lets ExtractiveReader load the checkpoint for calibration and
    # validation; its weights are final already.
    atomic_write_json(manifest_path, manifest)
    shutil.rmtree(work, ignore_errors=True)
    return calibrate_and_validate(out, dev=dev, threads=threads, log=log,
                                  calibration_sample=calibration_sample, limit=limit)


def calibrate_null_threshold(margins: Sequence[float], texts: Sequence[str],
                             examples: Sequence[ReaderExample]) -> dict[str, Any]:
    """The null threshold that maximises SQuAD 2.0 F1 on ``examples`` (the official script's
    ``best_f1_thresh``): an answerable example scores the token F1 of its best span if that
    span beats the null score by more than the threshold, else 0; a no-answer example scores 1
    when the reader abstains. ``margins`` are best span score minus null score."""
    from ambiqa.evaluation.metrics import token_f1

    gains = [token_f1(t, e.aliases) if e.answer_start is not None else 0.0
             for t, e in zip(texts, examples, strict=True)]
    null_gain = [0.0 if e.answer_start is not None else 1.0 for e in examples]
    n = max(1, len(examples))

    def score(th: float) -> float:
        return sum(g if m > th else z for m, g, z in zip(margins, gains, null_gain,
                                                         strict=True)) / n

    candidates = sorted({0.0, float("-inf"), *(m - 1e-6 for m in margins)})
    best = max(candidates, key=lambda th: (round(score(th), 6), -abs(th)))
    return {"null_threshold": best if math.isfinite(best) else -1e9,
            "f1_at_threshold": round(score(best), 4), "f1_at_zero": round(score(0.0), 4),
            "abstain_share": round(sum(m <= best for m in margins) / n, 4)}


def calibrate_and_validate(out: str | Path, *, dev: str | None = "asqa:dev",
                           threads: int = 2, calibration_sample: int = 400,
                           limit: int | None = None, long_answers_only: bool = False,
                           log: Callable[[str], None] = print) -> dict[str, Any]:
    """Calibrate the null threshold on training examples, then validate; rewrite the manifest.

    The SQuAD 2.0 recipe picks the threshold on held-out data; to keep evaluation data out,
    it is picked on a seeded sample of the *training* examples (built exactly as for training,
    no-answer examples included). A short training run leaves the null score poorly scaled,
    and without this the reader abstains on answers it has found. ``long_answers_only``
    samples only the long-answer examples (what D-F1 reads), not the extra passage sources,
    whose many no-answer examples push the threshold towards abstaining.
    """
    from ambiqa.data.specs import load_dataset

    out = Path(out).expanduser()
    reader = ExtractiveReader(out, threads=threads)
    manifest = dict(reader.manifest)
    cfg = manifest.get("config") or {}
    known = set(TrainConfig.__dataclass_fields__)
    tcfg = TrainConfig(**{k: v for k, v in cfg.items() if k in known})
    if calibration_sample > 0:
        sample_cfg = (TrainConfig(**{**asdict(tcfg), "asqa_passages": False, "hotpotqa": ""})
                      if long_answers_only else tcfg)
        examples, _ = training_examples(sample_cfg, limit)
        sample = list(examples)
        random.Random(int(cfg.get("seed", 0)) + 17).shuffle(sample)
        sample = sample[:calibration_sample]
        log(f"calibrating the null threshold on {len(sample)} training examples…")
        reader.null_threshold = float("-inf")
        margins, texts = [], []
        for e in sample:
            text, best, null = reader.answer_with_scores(e.question, e.context)
            margins.append(best - null if text else float("-inf"))
            texts.append(text)
        cal = calibrate_null_threshold(margins, texts, sample)
        manifest["calibration"] = {"data": cfg.get("train"), "n": len(sample),
                                   "sources": "long answers" if long_answers_only
                                   or not (tcfg.asqa_passages or tcfg.hotpotqa)
                                   else "all training sources", **cal}
        reader.null_threshold = float(cal["null_threshold"])
        log(f"null threshold {cal['null_threshold']:.3f}: training-sample F1 "
            f"{cal['f1_at_threshold']} (at 0: {cal['f1_at_zero']})")
    held = holdout_examples(tcfg)
    if held:
        log(f"validating on {len(held)} held-out training examples (grounding passages of "
            f"the last {tcfg.holdout} {tcfg.train} questions)…")
        scores = validate(reader, [], examples=held)
        manifest["holdout_validation"] = {"data": f"{tcfg.train} passages, last "
                                                  f"{tcfg.holdout} questions",
                                          **scores["squad"]}
    if dev:
        dev_records = load_dataset(dev)
        dev_examples, dev_counts = build_examples(dev_records)
        log(f"validating on {dev} ({len(dev_records)} questions)…")
        scores = validate(reader, dev_records, examples=dev_examples)
        manifest["validation"] = {"data": dev, "examples": dev_counts, **scores}
        log(f"validation: D-F1 reading the annotators' long answers = {scores['d_f1_human']}, "
            f"{scores['ms_per_question']} ms/question")
    atomic_write_json(out / MANIFEST_NAME, manifest)
    return manifest
