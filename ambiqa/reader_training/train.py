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

The example building lives in :mod:`ambiqa.reader_training.data` and the scoring (validation,
null-threshold choice) in :mod:`ambiqa.reader_training.validation`; this module keeps the
training loop, its resumable state and the finished checkpoint; the package
(:mod:`ambiqa.reader_training`) re-exports the public names of all three.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ambiqa import fsutil
from ambiqa.data.specs import is_training_split, load_dataset
from ambiqa.errors import ConfigError, ModelError
from ambiqa.evaluation.extractive import (
    DEFAULT_READER_NAME,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    WEIGHTS_NAME,
    ExtractiveReader,
    pad_batch,
    readers_dir,
)
from ambiqa.evaluation.shipped_reader import assemble_reader_model
from ambiqa.fsutil import atomic_write, atomic_write_json, atomic_write_text, sha256_file
from ambiqa.reader_training.config import TrainConfig
from ambiqa.reader_training.data import (
    ReaderExample,
    build_examples,
    build_hotpot_examples,
    build_passage_examples,
    featurize,
    holdout_examples,
    holdout_long_answer_examples,
    remove_sentence,
    training_examples,
)
from ambiqa.reader_training.validation import calibrate_null_threshold, validate

__all__ = [
    "ReaderExample", "TrainConfig", "build_examples", "build_hotpot_examples",
    "build_passage_examples", "calibrate_and_validate", "calibrate_null_threshold", "featurize",
    "holdout_examples", "holdout_long_answer_examples", "refuse_repo_output", "remove_sentence",
    "train_reader", "training_examples", "validate",
]


def refuse_repo_output(out_dir: Path) -> None:
    """Reader checkpoints are build products: never write them inside a git checkout's tree
    (a hidden top-level directory such as ``.ambiqa-cache`` is allowed, as for ColBERT)."""
    fsutil.refuse_repo_output(out_dir, "a reader checkpoint",
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
    from ambiqa.retrieval.encoder import minilm_path  # loads numpy

    return minilm_path()


def _save_state(work: Path, model: Any, optim: Any, progress: dict[str, Any]) -> None:
    """Weights + AdamW moments as safetensors, then the progress JSON (the commit point)."""
    from safetensors.torch import save_file

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


def train_reader(out_dir: str | Path | None = None, *, config: TrainConfig | None = None,
                 dev: str | None = "asqa:dev", limit: int | None = None,
                 threads: int = 2, save_every: int = 25, max_minutes: float | None = None,
                 stop_at_step: int | None = None, fresh: bool = False,
                 log: Callable[[str], None] = print,
                 command: str | None = None, calibration_sample: int = 400
                 ) -> dict[str, Any]:
    """Train (or resume) a reader into ``out_dir``; returns the manifest.

    ``max_minutes`` stops the schedule early at a save point (the manifest records the steps
    actually taken and says the schedule was cut); ``stop_at_step`` cuts the schedule at that
    step instead, so a reader once cut by the clock can be rebuilt (same steps, same
    learning-rate schedule; the same weights on the same CPU and torch build, while another
    CPU may differ in the last bits -- ``benchmarks/reader_rebuild.py`` checks the scores);
    ``fresh`` discards an earlier partial run.
    """
    cfg = config or TrainConfig()
    if stop_at_step is not None and stop_at_step < 1:
        raise ConfigError(f"--stop-at-step must be a step number of 1 or more, not {stop_at_step}")
    for spec in (cfg.train, cfg.hotpotqa):
        if spec and not is_training_split(spec):
            raise ConfigError(f"refusing to train the reader on evaluation data '{spec}'",
                              hint="use training splits, e.g. --train asqa:train")
    out = (Path(out_dir).expanduser() if out_dir is not None
           else readers_dir() / DEFAULT_READER_NAME)
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
        at_stop_step = stop_at_step is not None and step >= stop_at_step
        over = at_stop_step or (max_minutes is not None
                                and (elapsed_before + spent) / 60 >= max_minutes)
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
            why = (f"step {stop_at_step} reached" if at_stop_step
                   else f"time budget of {max_minutes} min reached")
            log(f"{why} at step {step}/{total}: finishing with the steps taken")
            break
    train_s = elapsed_before + time.perf_counter() - t_start
    return _finish(out, work, model, tokenizer, cfg, counts, step, total, train_s, cut,
                   steps_per_epoch, len(feats), limit, dev, threads, log, command,
                   calibration_sample)


def _finish(out: Path, work: Path, model: Any, tokenizer: Any, cfg: TrainConfig,
            counts: dict[str, int], step: int, total: int, train_s: float, cut: bool,
            steps_per_epoch: int, n_feats: int, limit: int | None, dev: str | None,
            threads: int, log: Callable[[str], None], command: str | None = None,
            calibration_sample: int = 400, validate_after: bool = True) -> dict[str, Any]:
    """Write the final checkpoint and a provisional manifest, then calibrate and validate."""
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
                 + (f"; + {cfg.hotpotqa} paragraphs" if cfg.hotpotqa else "")
                 + (f"; + {cfg.ambignq} disambiguated questions over {cfg.corpus} passages "
                    "holding their answers (distant supervision)" if cfg.ambignq else "")
                 + ("; + its interpretation lists" if cfg.ambignq and cfg.ambignq_lists
                    else "")
                 + (f"; long answers x{cfg.long_answer_repeat}"
                    if cfg.long_answer_repeat > 1 else "")
                 + "; records sharing a question with an evaluation split dropped",
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
    if not validate_after:
        return manifest
    return calibrate_and_validate(out, dev=dev, threads=threads, log=log,
                                  calibration_sample=calibration_sample, limit=limit)


def calibrate_and_validate(out: str | Path, *, dev: str | None = "asqa:dev",
                           threads: int = 2, calibration_sample: int = 400,
                           limit: int | None = None, long_answers_only: bool = False,
                           on_holdout: bool = False,
                           log: Callable[[str], None] = print) -> dict[str, Any]:
    """Calibrate the null threshold on training examples, then validate; rewrite the manifest.

    The SQuAD 2.0 recipe picks the threshold on held-out data; to keep evaluation data out,
    it is picked on a seeded sample of the *training* examples (built exactly as for training,
    no-answer examples included). A short training run leaves the null score poorly scaled,
    and without this the reader abstains on answers it has found. ``long_answers_only``
    samples only the long-answer examples (what D-F1 reads), not the extra passage sources,
    whose many no-answer examples push the threshold towards abstaining. ``on_holdout``
    calibrates on the long-answer examples of the held-out *training* questions instead (all
    of them; ``calibration_sample`` then only switches calibration on): a reader trained for
    several epochs scores its own training examples with margins it will not show on new
    text, so a threshold fitted there abstains too little.
    """
    out = Path(out).expanduser()
    reader = ExtractiveReader(out, threads=threads)
    manifest = dict(reader.manifest)
    cfg = manifest.get("config") or {}
    known = set(TrainConfig.__dataclass_fields__)
    tcfg = TrainConfig(**{k: v for k, v in cfg.items() if k in known})
    if calibration_sample > 0:
        sample_cfg = (TrainConfig(**{**asdict(tcfg), "asqa_passages": False, "hotpotqa": ""})
                      if long_answers_only else tcfg)
        if on_holdout:
            sample = holdout_long_answer_examples(tcfg)
            if not sample:
                raise ConfigError("calibrating on the holdout needs a reader trained with "
                                  "--holdout N")
        else:
            examples, _ = training_examples(sample_cfg, limit)
            sample = list(examples)
            random.Random(int(cfg.get("seed", 0)) + 17).shuffle(sample)
            sample = sample[:calibration_sample]
        log(f"calibrating the null threshold on {len(sample)} "
            f"{'held-out ' if on_holdout else ''}training examples…")
        reader.null_threshold = float("-inf")
        margins, texts = [], []
        for e in sample:
            text, best, null = reader.answer_with_scores(e.question, e.context)
            margins.append(best - null if text else float("-inf"))
            texts.append(text)
        cal = calibrate_null_threshold(margins, texts, sample)
        manifest["calibration"] = {"data": cfg.get("train"), "n": len(sample),
                                   "sources": f"long answers of the {tcfg.holdout} held-out "
                                   "training questions" if on_holdout
                                   else "long answers" if long_answers_only
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


# --------------------------------------------------------------------------------------------
# training elsewhere: a pre-tokenised pack out, trained weights back in
# --------------------------------------------------------------------------------------------


def _pack_windows(feats: list[Any], remap: dict[int, int], example_of: list[int]
                  ) -> dict[str, Any]:
    import numpy as np

    lengths = np.array([len(w.input_ids) for w in feats], dtype=np.int32)
    offsets = np.zeros(len(feats) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(lengths)
    ids = np.array([remap[t] for w in feats for t in w.input_ids], dtype=np.uint16)
    return {"ids": ids, "lengths": lengths, "offsets": offsets,
            "context_start": np.array([w.context_start for w in feats], dtype=np.int32),
            "start": np.array([w.meta["start"] for w in feats], dtype=np.int32),
            "end": np.array([w.meta["end"] for w in feats], dtype=np.int32),
            "example": np.array(example_of, dtype=np.int32)}


def pack_for_device(pack_dir: str | Path, *, config: TrainConfig | None = None,
                    limit: int | None = None, log: Callable[[str], None] = print
                    ) -> dict[str, Any]:
    """Write what ``benchmarks/reader_gpu_train.py`` trains from, for a machine without ambiqa.

    The pack holds the training windows (built exactly as ``ambiqa reader train`` builds them:
    same sources, same evaluation-question guard, same featurisation) and the holdout
    long-answer windows (the last ``config.holdout`` ASQA *training* questions), as token ids;
    and the base encoder in half precision with only the word-embedding rows those windows use
    (ids remapped), which keeps the pack small enough to travel. The word embeddings are
    frozen in training, so the finished reader takes them from the full encoder
    (:func:`finish_from_device`). Returns the pack's metadata (``pack.json``).
    """
    import numpy as np
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    cfg = config or TrainConfig()
    if not cfg.holdout:
        raise ConfigError("a device pack needs --holdout N (the epoch is chosen on it)")
    if not cfg.freeze_embeddings:
        raise ConfigError("a device pack carries only the used word-embedding rows: it needs "
                          "frozen word embeddings")
    out = Path(pack_dir).expanduser()
    base = _base_model_path(cfg.base or None)
    cfg.base = str(base)
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    examples, counts = training_examples(cfg, limit)
    feats = featurize(tokenizer, examples, max_length=cfg.max_length,
                      doc_stride=cfg.doc_stride, max_question_tokens=cfg.max_question_tokens)
    sources = sorted({e.source for e in examples})
    by_qid = {e.qid: sources.index(e.source) for e in examples}
    train_ex = [by_qid[w.meta["qid"]] for w in feats]  # the "example" column: source index
    held = holdout_long_answer_examples(cfg)
    held_feats: list[Any] = []
    held_of: list[int] = []
    for k, ex in enumerate(held):
        f = featurize(tokenizer, [ex], max_length=cfg.max_length, doc_stride=cfg.doc_stride,
                      max_question_tokens=cfg.max_question_tokens)
        held_feats += f
        held_of += [k] * len(f)
    used = sorted({t for w in feats + held_feats for t in w.input_ids}
                  | {tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id})
    remap = {t: i for i, t in enumerate(used)}
    if len(used) >= 65536:
        raise ConfigError("too many distinct tokens for a pack (uint16 ids)")
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / "train.npz", **_pack_windows(feats, remap, train_ex))
    np.savez_compressed(out / "holdout.npz", **_pack_windows(held_feats, remap, held_of))
    weights = load_file(str(base / WEIGHTS_NAME))
    emb_key = next(k for k in weights if k.endswith("word_embeddings.weight"))
    small = {("bert." + k if not k.startswith("bert.") else k): v.half().contiguous()
             for k, v in weights.items() if k != emb_key}
    emb = weights[emb_key][torch.tensor(used)].half().contiguous()
    small["bert.embeddings.word_embeddings.weight"] = emb
    save_file(small, str(out / "encoder.safetensors"))
    conf = json.loads((base / "config.json").read_text(encoding="utf-8"))
    conf.update({"vocab_size": len(used), "pad_token_id": remap[tokenizer.pad_token_id],
                 "architectures": ["BertForQuestionAnswering"]})
    atomic_write_json(out / "config.json", conf)
    meta = {"format": "ambiqa-reader-pack/1", "config": asdict(cfg), "limit": limit,
            "examples": counts, "windows": len(feats), "holdout_examples": len(held),
            "holdout_windows": len(held_feats), "pad_id": remap[tokenizer.pad_token_id],
            "vocab_used": len(used), "base_sha256": sha256_file(base / WEIGHTS_NAME),
            "sources": sources,
            "fingerprint": {**asdict(cfg), "limit": limit, "n_features": len(feats)}}
    atomic_write_json(out / "pack.json", meta)
    log(f"pack {out}: {len(feats)} training windows, {len(held_feats)} holdout windows "
        f"({len(held)} examples), {len(used)} word-embedding rows")
    return meta


def finish_from_device(out_dir: str | Path, shards: list[str | Path], *, pack: str | Path,
                       run: dict[str, Any], dev: str | None = None, threads: int = 2,
                       calibration_sample: int = 400, long_answers_only: bool = True,
                       log: Callable[[str], None] = print, command: str | None = None,
                       on_holdout: bool = True) -> dict[str, Any]:
    """A reader checkpoint from weights trained on another machine from ``pack``.

    The trainable weights come from ``shards`` (half precision, as the device script writes
    them); the frozen word embeddings from the packaged encoder, rounded to half precision as
    the device saw them. The manifest records the pack's configuration and the device run
    (``run``: lr, epochs, the chosen epoch and its holdout history), then the null threshold is
    calibrated and the reader validated as after ``ambiqa reader train``.
    """
    from safetensors.torch import save_file

    meta = json.loads((Path(pack) / "pack.json").read_text(encoding="utf-8"))
    known = set(TrainConfig.__dataclass_fields__)
    cfg = TrainConfig(**{k: v for k, v in meta["config"].items() if k in known})
    cfg.lr = float(run.get("lr", cfg.lr))
    cfg.epochs = float(run.get("epochs", cfg.epochs))
    cfg.seed = int(run.get("seed", cfg.seed))
    cfg.batch_size = int(run.get("batch_size", cfg.batch_size))
    base = _base_model_path(cfg.base or None)
    if sha256_file(base / WEIGHTS_NAME) != meta.get("base_sha256"):
        raise ModelError(f"the base encoder {base} is not the one the pack was made from",
                         hint="finish on the machine (encoder package) that made the pack")
    out = Path(out_dir).expanduser()
    refuse_repo_output(out)
    model, tokenizer = assemble_reader_model(base, [Path(x) for x in shards])
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()},
              str(work / WEIGHTS_NAME))
    history = run.get("history") or []
    steps = int(run.get("steps") or 0)
    spe = int(run.get("steps_per_epoch") or 1)
    best_epoch = int(run.get("best_epoch") or len(history))
    chosen_step = int(history[best_epoch - 1]["step"]) if history else steps
    planned = max(1, math.ceil(cfg.epochs * spe))  # the schedule's length (lr decays to it)
    manifest = _finish(out, work, model, tokenizer, cfg, meta["examples"], chosen_step, planned,
                       float(run.get("train_s") or 0.0), chosen_step < steps, spe,
                       int(meta["windows"]), meta.get("limit"), None, threads, log, command,
                       0, validate_after=False)
    manifest["trained_on"] = {"device": run.get("device"), "torch": run.get("torch"),
                              "script": "benchmarks/reader_gpu_train.py",
                              "epoch_chosen_on": "holdout long answers (training split), "
                                                 "SQuAD 2.0 F1 on token ids at the best "
                                                 "null threshold",
                              "chosen_epoch": best_epoch, "steps_run": steps,
                              "history": history}
    atomic_write_json(out / MANIFEST_NAME, manifest)
    return calibrate_and_validate(out, dev=dev, threads=threads,
                                  calibration_sample=calibration_sample,
                                  limit=meta.get("limit"), long_answers_only=long_answers_only,
                                  on_holdout=on_holdout, log=log)
