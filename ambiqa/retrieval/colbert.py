"""ColBERT (late interaction) retrieval with colbert-ai 0.2.22 on CPU.

ColBERT is the retriever the papers use. :meth:`ColBERTRetriever.build` indexes a corpus with
colbert-ai's PLAID indexer and :meth:`ColBERTRetriever.load` opens it for search; programs only
see the :class:`~ambiqa.retrieval.base.Retriever` protocol.

Index layout, ``<index_root>/<name>/``:

* colbert-ai's files (``plan.json``, ``metadata.json``, ``centroids.pt``, ``ivf.pid.pt``,
  ``N.codes.pt``, ``N.residuals.pt``, ``doclens.N.json``, ...);
* ``collection.jsonl`` -- ``{"id", "title", "text"}`` per passage in index order, so a
  colbert pid maps back to the corpus passage without the original corpus file;
* ``colbert.log`` -- everything colbert-ai, faiss and the extension builds print;
* ``ambiqa_manifest.json`` -- written last and atomically: corpus fingerprint, passage count,
  checkpoint (path, identity or trained, id), settings, build time, versions. An index without a
  valid manifest never loads.

A build writes into ``<name>.tmp-<pid>-<random>`` beside the target and renames it into place at
the end, so a killed build leaves only a temporary directory (removed by the next build once
its process is gone) and never a half-built index under ``<name>``.

Indexing text is colbert-ai's own title handling: ``"title | text"``.

CPU settings (DESIGN.md): ``RunConfig(gpus=0, avoid_fork_if_possible=True, amp=False)``,
``overwrite="force_silent_overwrite"`` (``True`` sleeps 20 s), a local checkpoint directory
(otherwise the tokenizer looks up bert-base-uncased online) and ``TORCH_EXTENSIONS_DIR`` under
``$AMBIQA_CACHE`` (four C++ extensions compile on first use, ~30 s each, then stay cached).

Build speed: colbert-ai would encode every passage twice on corpora under ~30k passages (its
k-means sample is the whole corpus) and cluster into 16,384 centroids for the shared corpus;
ambiqa caps the sample at 25% of the passages and the centroids by the sample's size (see
:func:`kmeans_sample_size`; ``kmeans_share=1.0`` restores colbert-ai's rule). The manifest
records the share and the centroid count.

Scaling: colbert-ai keeps the collection's strings in memory (once per indexing process) plus
the compressed token embeddings (~40-70 bytes per token at ``nbits=2``; ~100 tokens per
passage). The corpus is streamed from its JSONL file into ``collection.jsonl`` and a TSV that
colbert-ai reads itself, so ambiqa never holds a second copy. ``nranks=N`` starts N indexing
processes (each encodes every N-th chunk of up to 25k passages; CPU-only runs need the
``torch.distributed`` gloo shim below, since colbert-ai only wires up NCCL). On one machine
this helps only with spare cores: encoding is CPU bound and torch already uses every core in
one process. A corpus that outgrows one machine's memory is split into shards
(``ambiqa index dump.jsonl --name wiki --shards N``, :mod:`ambiqa.retrieval.sharded`): each
shard is streamed from the file and built on its own (shards can be built on several machines
with one checkpoint), and ``open_retriever("wiki")`` searches them all and merges by score.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import json
import logging
import math
import os
import re
import secrets
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from ambiqa.errors import AmbiqaError, ConfigError, DataError, IndexError_
from ambiqa.fsutil import atomic_write_json
from ambiqa.retrieval.base import PassageCheck, check_query, timed_search
from ambiqa.types import Passage, SharedResource

log = logging.getLogger(__name__)

# OpenMP's default spin-waiting makes every small torch op ~100x slower when the cores are
# shared with other busy processes (measured: a 32x384 @ 384x384 matmul 18 ms instead of
# 0.2 ms with 2 threads on a loaded 2-core machine). Passive waiting costs nothing otherwise.
# It only takes effect if torch has not been imported yet.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

MANIFEST = "ambiqa_manifest.json"
COLLECTION = "collection.jsonl"
COLBERT_TSV = "collection.tsv"
LOG_FILE = "colbert.log"
FORMAT_VERSION = 1
# colbert-ai files every finished index has (chunk files are checked against metadata.json).
COLBERT_FILES = ("metadata.json", "plan.json", "centroids.pt", "buckets.pt", "avg_residual.pt",
                 "ivf.pid.pt")
MANIFEST_KEYS = {
    "format": int, "name": str, "corpus_sha256": str, "n_passages": int, "checkpoint": dict,
    "nbits": int, "doc_maxlen": int, "query_maxlen": int, "dim": int, "build_seconds": float,
    "built_at": str, "colbert_ai_version": str,
}
# Rough build-time model for the up-front estimate, fitted to the full 12.8k-passage build on
# 2 shared cores (setup 299 s, k-means 234 s, encode + compress 610 s): encoding costs ~15 ms
# per passage per pass (colbert-ai encodes each passage twice under ~30k passages); k-means
# (4 iterations over the sample) and compression (1 pass over every embedding) cost
# embeddings x centroids x dim multiply-adds at ~130 GFLOP/s. Passages average ~90 tokens.
ENCODE_SECONDS_PER_PASSAGE = 0.015
TOKENS_PER_PASSAGE = 90
FLOPS_PER_SECOND = 1.3e11


def estimate_build_seconds(n_passages: int, dim: int = 384,
                           kmeans_share: float | None = None) -> float:
    """A rough CPU build time for ``n_passages`` (for the user, not for decisions)."""
    sample = kmeans_sample_size(n_passages, kmeans_share)
    n_emb = n_passages * TOKENS_PER_PASSAGE
    partitions = partitions_for(n_emb, sample * TOKENS_PER_PASSAGE, kmeans_share)
    assignments = 4 * sample * TOKENS_PER_PASSAGE + n_emb  # k-means passes + compression
    clustering = assignments * partitions * dim * 2 / FLOPS_PER_SECOND
    return (sample + n_passages) * ENCODE_SECONDS_PER_PASSAGE + clustering
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_IMPORT_LOCK = threading.Lock()
_IMPORTED = False


# --------------------------------------------------------------------------------------------
# colbert-ai import and environment
# --------------------------------------------------------------------------------------------
def import_colbert() -> None:
    """Import colbert-ai once, with ambiqa's environment, undoing its process-wide side effects.

    Sets ``TORCH_EXTENSIONS_DIR`` (unless the user did) before anything compiles, keeps
    transformers offline, and restores the multiprocessing start method and
    ``TOKENIZERS_PARALLELISM``, which colbert-ai overrides for the whole process at import.
    """
    global _IMPORTED
    if _IMPORTED:
        return
    with _IMPORT_LOCK:
        if _IMPORTED:
            return
        from ambiqa.lm import cache_root

        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache_root() / "torch_extensions"))
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import multiprocessing

        previous_method = multiprocessing.get_start_method(allow_none=True)
        previous_tok = os.environ.get("TOKENIZERS_PARALLELISM")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import colbert.indexer  # noqa: F401
                import colbert.searcher  # noqa: F401
        except ImportError as exc:
            raise IndexError_(f"colbert-ai cannot be imported: {exc}",
                              hint="pip install colbert-ai==0.2.22 faiss-cpu") from exc
        finally:
            multiprocessing.set_start_method(previous_method, force=True)
            if previous_tok is None:
                os.environ.pop("TOKENIZERS_PARALLELISM", None)
            else:
                os.environ["TOKENIZERS_PARALLELISM"] = previous_tok
        _IMPORTED = True


def colbert_version() -> str:
    try:
        return importlib.metadata.version("colbert-ai")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# --------------------------------------------------------------------------------------------
# corpus reading and fingerprints
# --------------------------------------------------------------------------------------------
def iter_corpus(path: str | os.PathLike[str]) -> Iterator[Passage]:
    """Stream a corpus JSONL file as passages (the data layer's validating reader)."""
    from ambiqa.data.corpus import iter_corpus as _iter_corpus

    return _iter_corpus(Path(path).expanduser())


class _Fingerprint:
    """sha256 over (id, title, text) of every passage, in order."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def update(self, p: Passage) -> None:
        self._h.update(json.dumps([p.id, p.title, p.text], ensure_ascii=False).encode() + b"\n")

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def corpus_fingerprint(corpus: Iterable[Passage] | str | os.PathLike[str]) -> str:
    """The sha256 of the passages' contents that an index manifest records.

    Unlike :func:`ambiqa.data.corpus_fingerprint` (bytes of a file), this hashes (id, title,
    text) in order, so the same passages reformatted or passed as a list fingerprint the same.
    """
    fp = _Fingerprint()
    for p in _passages_of(corpus):
        fp.update(p)
    return fp.hexdigest()


def _passages_of(corpus: Iterable[Passage] | str | os.PathLike[str]) -> Iterator[Passage]:
    if isinstance(corpus, (str, os.PathLike)):
        return iter_corpus(corpus)
    return iter(corpus)


# --------------------------------------------------------------------------------------------
# manifest
# --------------------------------------------------------------------------------------------
def _rebuild_hint(name: str) -> str:
    return f"ambiqa index CORPUS --name {name}"


def validate_manifest(data: object, index_dir: Path) -> dict[str, Any]:
    """Check a manifest's keys and types; raise :class:`IndexError_` naming the problem."""
    name = index_dir.name
    where = index_dir / MANIFEST
    if not isinstance(data, dict):
        raise IndexError_(f"index manifest {where} is not a JSON object",
                          hint=f"rebuild the index: {_rebuild_hint(name)}")
    for key, typ in MANIFEST_KEYS.items():
        value = data.get(key)
        ok = isinstance(value, typ) and not isinstance(value, bool)
        if typ is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            raise IndexError_(f"index manifest {where} lacks a valid {key!r}",
                              hint=f"rebuild the index: {_rebuild_hint(name)}")
    if data["format"] != FORMAT_VERSION:
        raise IndexError_(f"index {index_dir} has manifest format {data['format']}, this ambiqa "
                          f"reads format {FORMAT_VERSION}",
                          hint=f"rebuild the index: {_rebuild_hint(name)}")
    if data["n_passages"] < 1:
        raise IndexError_(f"index manifest {where} records no passages",
                          hint=f"rebuild the index: {_rebuild_hint(name)}")
    ckpt = data["checkpoint"]
    if not isinstance(ckpt.get("path"), str) or ckpt.get("kind") not in ("identity", "trained"):
        raise IndexError_(f"index manifest {where} has no valid checkpoint record",
                          hint=f"rebuild the index: {_rebuild_hint(name)}")
    return data


def read_manifest(index_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate ``<index_dir>/ambiqa_manifest.json``."""
    index_dir = Path(index_dir)
    name = index_dir.name
    if not index_dir.is_dir():
        raise IndexError_(f"no ColBERT index at {index_dir}",
                          hint=f"build it first: {_rebuild_hint(name)}")
    path = index_dir / MANIFEST
    if not path.is_file():
        raise IndexError_(f"{index_dir} has no {MANIFEST}: the index is incomplete "
                          "(an interrupted build) or not an ambiqa index",
                          hint=f"rebuild it: {_rebuild_hint(name)}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IndexError_(f"index manifest {path} is unreadable or corrupt ({exc})",
                          hint=f"rebuild the index: {_rebuild_hint(name)}") from exc
    return validate_manifest(data, index_dir)


def check_colbert_files(index_dir: Path, n_passages: int) -> None:
    """colbert-ai's files exist and its metadata agrees with the manifest's passage count."""
    name = index_dir.name
    missing = [f for f in COLBERT_FILES if not (index_dir / f).is_file()]
    if missing:
        raise IndexError_(f"index {index_dir} lacks colbert-ai files: {', '.join(missing)}",
                          hint=f"rebuild the index: {_rebuild_hint(name)}")
    try:
        meta = json.loads((index_dir / "metadata.json").read_text(encoding="utf-8"))
        n_chunks = int(meta["num_chunks"])
        counted = 0
        for i in range(n_chunks):
            counted += len(json.loads((index_dir / f"doclens.{i}.json").read_text()))
            for suffix in ("codes.pt", "residuals.pt"):
                if not (index_dir / f"{i}.{suffix}").is_file():
                    raise FileNotFoundError(f"{i}.{suffix}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise IndexError_(f"index {index_dir} has corrupt or missing colbert-ai files ({exc})",
                          hint=f"rebuild the index: {_rebuild_hint(name)}") from exc
    if counted != n_passages:
        raise IndexError_(f"index {index_dir} holds {counted} passages but its manifest says "
                          f"{n_passages}", hint=f"rebuild the index: {_rebuild_hint(name)}")


def _read_collection(index_dir: Path, manifest: dict[str, Any]) -> list[Passage]:
    """Read ``collection.jsonl`` and check it against the manifest's fingerprint."""
    path = index_dir / COLLECTION
    hint = f"rebuild the index: {_rebuild_hint(index_dir.name)}"
    if not path.is_file():
        raise IndexError_(f"index {index_dir} lacks {COLLECTION}", hint=hint)
    passages, fp = [], _Fingerprint()
    try:
        for p in iter_corpus(path):
            passages.append(p)
            fp.update(p)
    except DataError as exc:
        raise IndexError_(f"index collection is corrupt: {exc.message}", hint=hint) from exc
    if len(passages) != manifest["n_passages"] or fp.hexdigest() != manifest["corpus_sha256"]:
        raise IndexError_(f"{path} does not match the index manifest (changed after the build)",
                          hint=hint)
    return passages


# --------------------------------------------------------------------------------------------
# output capture and progress
# --------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _captured_output(log_path: Path) -> Iterator[IO[str]]:
    """Send what colbert-ai, faiss and torch print (Python and C level) to ``log_path``.

    Yields a text stream that still reaches the user's stderr, for ambiqa's own progress.
    """
    orig_out, orig_err = sys.stdout, sys.stderr
    for stream in (orig_out, orig_err):
        with contextlib.suppress(Exception):
            stream.flush()
    log_fh = open(log_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
    saved: dict[int, int] = {}
    terminal: IO[str] = orig_err
    own_terminal = False
    try:
        try:
            for fd in (1, 2):
                saved[fd] = os.dup(fd)
            for fd in (1, 2):
                os.dup2(log_fh.fileno(), fd)
        except OSError:  # no real fds (embedded interpreters): Python-level capture only
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            saved.clear()
        try:
            err_fd = orig_err.fileno()
        except (AttributeError, OSError, io.UnsupportedOperation):
            err_fd = -1
        if err_fd in saved:
            terminal = os.fdopen(os.dup(saved[err_fd]), "w", encoding="utf-8", buffering=1)
            own_terminal = True
        with contextlib.redirect_stdout(log_fh), contextlib.redirect_stderr(log_fh):
            yield terminal
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        if own_terminal:
            terminal.close()
        log_fh.close()


class _BuildProgress:
    """Stage messages, elapsed time and a passage-level bar for a colbert-ai build.

    colbert-ai gives no callbacks, so for single-process builds the stages are observed by
    wrapping ``CollectionIndexer.setup/train/index/finalize`` and the bar by wrapping
    ``Checkpoint.doc`` (one call per encoded batch) for the duration of the build only.
    colbert-ai encodes a sample of passages (all of them under ~30k) to train centroids, then
    every passage again, so the bar's total is sample + corpus.
    """

    STAGES = {"setup": "sampling passages for centroids", "train": "clustering (k-means)",
              "index": "encoding and compressing passages", "finalize": "writing the inverted file"}

    def __init__(self, n: int, nranks: int, stream: IO[str] | None, dim: int = 384,
                 kmeans_share: float | None = None) -> None:
        self.n, self.nranks, self.dim, self.kmeans_share = n, nranks, dim, kmeans_share
        self.total = kmeans_sample_size(n, kmeans_share) + n
        self.stream = stream
        self.stage_seconds: dict[str, float] = {}
        self._progress: Any = None
        self._task: Any = None
        self._patches: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> _BuildProgress:
        self.start = time.perf_counter()
        if self.stream is not None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            console = Console(file=self.stream, stderr=False)
            est = estimate_build_seconds(self.n, self.dim, self.kmeans_share)
            console.print(f"[bold]ColBERT indexing[/] {self.n:,} passages on CPU "
                          f"({self.nranks} process{'es' if self.nranks > 1 else ''}); "
                          f"rough estimate ~{_fmt_seconds(est)} on 2 free cores")
            columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
            if self.nranks == 1:
                columns += [BarColumn(), MofNCompleteColumn(), TextColumn("encoded"),
                            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn()]
            else:
                columns += [TimeElapsedColumn()]
            self._progress = Progress(*columns, console=console, transient=False)
            self._progress.start()
            self._task = self._progress.add_task(
                "starting" if self.nranks == 1 else f"indexing in {self.nranks} processes",
                total=self.total if self.nranks == 1 else None)
        if self.nranks == 1:
            self._install_hooks()
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, attr, original in reversed(self._patches):
            setattr(owner, attr, original)
        self._patches.clear()
        if self._progress is not None:
            if exc[0] is None:
                self._progress.update(self._task, completed=self.total, description="done")
            self._progress.stop()

    def _install_hooks(self) -> None:
        from colbert.indexing.collection_indexer import CollectionIndexer
        from colbert.modeling.checkpoint import Checkpoint

        for stage in self.STAGES:
            self._wrap_stage(CollectionIndexer, stage)
        original_doc = Checkpoint.doc
        advance = self._advance

        def doc(ckpt: Any, *args: Any, **kwargs: Any) -> Any:
            out = original_doc(ckpt, *args, **kwargs)
            ids = args[0] if args else kwargs.get("input_ids")
            advance(int(ids.size(0)) if ids is not None else 0)
            return out

        self._patches.append((Checkpoint, "doc", original_doc))
        Checkpoint.doc = doc

    def _wrap_stage(self, owner: Any, stage: str) -> None:
        original = getattr(owner, stage)
        progress = self

        def wrapped(indexer: Any, *args: Any, **kwargs: Any) -> Any:
            progress._stage(stage)
            t0 = time.perf_counter()
            try:
                return original(indexer, *args, **kwargs)
            finally:
                progress.stage_seconds[stage] = round(time.perf_counter() - t0, 2)
                log.info("colbert stage %s took %.1f s", stage, time.perf_counter() - t0)

        self._patches.append((owner, stage, original))
        setattr(owner, stage, wrapped)

    def _stage(self, stage: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=self.STAGES[stage])

    def _advance(self, n: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)


def _fmt_seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"


# --------------------------------------------------------------------------------------------
# colbert-ai fixes needed for this checkpoint on CPU
# --------------------------------------------------------------------------------------------
# torch.quantile refuses inputs of more than 2**24 elements. colbert-ai computes residual
# quantiles over a held-out sample of up to 50,000 embeddings, which with 384-dim vectors is
# 19.2M elements: every corpus above ~9k passages fails after k-means ("quantile() input
# tensor is too large"). colbert-ai's usual dim of 128 stays under the limit.
QUANTILE_MAX_ELEMENTS = 2**24


def limit_heldout(heldout: Any) -> Any:
    """The first rows of ``heldout`` that fit torch.quantile (it is already shuffled)."""
    max_rows = QUANTILE_MAX_ELEMENTS // max(1, int(heldout.size(1)))
    return heldout[:max_rows] if heldout.size(0) > max_rows else heldout


# Build speed. colbert-ai encodes a k-means sample of 16*sqrt(120*n) passages, which is the
# whole corpus below ~30k passages, and then encodes every passage again; it clusters into
# 2**floor(log2(16*sqrt(embeddings))) centroids. On the 12.8k-passage corpus that is two full
# encoding passes and 16,384 centroids for ~1.16M token vectors (~70 per centroid), i.e. most of
# the 19-minute build. ambiqa caps the sample at a share of the corpus (default 25%, at least
# 1,000 passages) and the centroids at one per MIN_POINTS_PER_CENTROID sampled vectors, so
# k-means sees enough points per centroid; above ~500k passages colbert-ai's own (smaller)
# sample applies unchanged. ``kmeans_share=1.0`` restores colbert-ai's behaviour.
DEFAULT_KMEANS_SHARE = 0.25
MIN_KMEANS_PASSAGES = 1000
MIN_POINTS_PER_CENTROID = 32
_KMEANS_SHARE_ENV = "AMBIQA_KMEANS_SHARE"  # carries the setting into spawned ranks


def kmeans_sample_size(n: int, share: float | None = None) -> int:
    """How many passages are encoded to train the centroids."""
    rule = min(1 + int(16 * math.sqrt(120 * n)), n)  # colbert-ai's rule
    share = DEFAULT_KMEANS_SHARE if share is None else share
    if share >= 1.0:
        return rule
    return min(rule, max(math.ceil(share * n), min(n, MIN_KMEANS_PASSAGES)))


def partitions_for(n_embeddings_est: float, n_sample_embeddings: float,
                   share: float | None = None) -> int:
    """Number of centroids: colbert-ai's rule, capped by the sample's size."""
    rule = int(2 ** math.floor(math.log2(16 * math.sqrt(max(n_embeddings_est, 1)))))
    if (DEFAULT_KMEANS_SHARE if share is None else share) >= 1.0:
        return rule
    cap = n_sample_embeddings / MIN_POINTS_PER_CENTROID
    capped = int(2 ** math.floor(math.log2(cap))) if cap >= 2 else 2
    return max(2, min(rule, capped))


@contextlib.contextmanager
def _colbert_fixes(kmeans_share: float | None = None) -> Iterator[None]:
    """Patch colbert-ai's indexer for the duration of a build.

    * held-out residual sample cut to what ``torch.quantile`` accepts (large-dim checkpoints);
    * the k-means sample and the number of centroids (see :func:`kmeans_sample_size`).
    """
    from colbert.indexing.collection_indexer import CollectionIndexer

    if kmeans_share is None and os.environ.get(_KMEANS_SHARE_ENV):
        kmeans_share = float(os.environ[_KMEANS_SHARE_ENV])
    originals = {name: getattr(CollectionIndexer, name)
                 for name in ("_compute_avg_residual", "_sample_pids", "_save_plan")}

    def _compute_avg_residual(indexer: Any, centroids: Any, heldout: Any) -> Any:
        return originals["_compute_avg_residual"](indexer, centroids, limit_heldout(heldout))

    def _sample_pids(indexer: Any) -> set[int]:
        import random

        n = len(indexer.collection)
        return set(random.Random(12345).sample(range(n), kmeans_sample_size(n, kmeans_share)))

    def _save_plan(indexer: Any) -> Any:
        n_sample = float(getattr(indexer, "num_sample_embs", 0) or 0)
        indexer.num_partitions = partitions_for(indexer.num_embeddings_est, n_sample,
                                                kmeans_share)
        log.info("colbert plan: %d centroids for ~%d embeddings (%d sampled)",
                 indexer.num_partitions, int(indexer.num_embeddings_est), int(n_sample))
        return originals["_save_plan"](indexer)

    CollectionIndexer._compute_avg_residual = _compute_avg_residual
    CollectionIndexer._sample_pids = _sample_pids
    CollectionIndexer._save_plan = _save_plan
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(CollectionIndexer, name, fn)


# --------------------------------------------------------------------------------------------
# multi-process CPU indexing
# --------------------------------------------------------------------------------------------
def _encode_cpu_rank(config: Any, collection: Any, shared_lists: Any, shared_queues: Any,
                     verbose: int) -> None:
    """colbert-ai's per-rank indexing entry point, made to work without GPUs.

    colbert-ai only creates a process group when CUDA is present (NCCL) and its barrier asks
    for a CUDA device id, so CPU ranks would neither share sample statistics nor wait for each
    other. Here each rank joins a gloo process group (colbert-ai's launcher has set
    MASTER_ADDR/PORT, RANK and WORLD_SIZE) and the barrier becomes gloo's.
    """
    import torch.distributed as dist

    import_colbert()
    import colbert.utils.distributed as colbert_distributed
    from colbert.indexing.collection_indexer import encode

    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=config.rank, world_size=config.nranks)
    colbert_distributed.barrier = lambda rank: dist.barrier()
    try:
        with _colbert_fixes():
            encode(config, collection, shared_lists, shared_queues, verbose)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _run_indexer(checkpoint: Path, index_dir: Path, tsv: Path, nbits: int, doc_maxlen: int,
                 nranks: int, kmeans_share: float | None = None) -> None:
    """Run colbert-ai's indexer over ``tsv`` into ``index_dir`` (CPU settings)."""
    from colbert.indexer import Indexer
    from colbert.infra import ColBERTConfig, Run, RunConfig

    run_config = RunConfig(nranks=nranks, gpus=0, avoid_fork_if_possible=True, amp=False,
                           root=str(index_dir), experiment="colbert-run",
                           index_root=str(index_dir.parent))
    with Run().context(run_config):
        config = ColBERTConfig(nbits=nbits, doc_maxlen=doc_maxlen, checkpoint=str(checkpoint),
                               index_path=str(index_dir))
        indexer = Indexer(checkpoint=str(checkpoint), config=config, verbose=1)
        if nranks == 1:
            with _colbert_fixes(kmeans_share):
                indexer.index(name=index_dir.name, collection=str(tsv),
                              overwrite="force_silent_overwrite")
            return
        # Multi-process: colbert-ai's own launcher (spawned ranks) with the CPU shim above.
        import torch.multiprocessing as mp
        from colbert.infra.launcher import Launcher

        indexer.configure(collection=str(tsv), index_name=index_dir.name, resume=False,
                          bsize=64, partitions=None)
        previous = mp.get_start_method(allow_none=True)
        mp.set_start_method("spawn", force=True)
        previous_share = os.environ.get(_KMEANS_SHARE_ENV)
        if kmeans_share is not None:
            os.environ[_KMEANS_SHARE_ENV] = str(kmeans_share)
        try:
            manager = mp.Manager()
            shared_lists = [manager.list() for _ in range(nranks)]
            shared_queues = [manager.Queue(maxsize=1) for _ in range(nranks)]
            Launcher(_encode_cpu_rank).launch(indexer.config, str(tsv), shared_lists,
                                              shared_queues, 1)
            manager.shutdown()
        finally:
            mp.set_start_method(previous, force=True)
            if previous_share is None:
                os.environ.pop(_KMEANS_SHARE_ENV, None)
            else:
                os.environ[_KMEANS_SHARE_ENV] = previous_share


# --------------------------------------------------------------------------------------------
# queries that fit
# --------------------------------------------------------------------------------------------
# colbert-ai pads every query with [MASK] tokens to ``query_maxlen`` (32) and silently cuts
# longer ones: measured with the MiniLM tokenizer, 8.7% of HotpotQA dev questions, 10% of
# HotpotQA train questions and 1.8% of ASQA's disambiguated questions lose their tail
# (benchmarks/results/query_lengths.md). ambiqa keeps ``query_maxlen`` as the *minimum* length
# (the [MASK] padding a short query gets, so short queries encode exactly as colbert-ai's) and
# lets a longer query grow to fit, up to QUERY_HARD_MAX tokens. Training and search both use
# :func:`fit_query_tensors`, so the model is trained on the lengths it is searched with.
# (colbert-ai's own ``full_length_search`` still cuts the last 3 word pieces of a long query,
# and only works one query at a time.)
QUERY_HARD_MAX = 256


def fit_query_tensors(tok: Any, texts: Sequence[str], min_len: int, q_marker_id: int,
                      max_len: int = QUERY_HARD_MAX) -> tuple[Any, Any]:
    """Token ids and attention mask for ColBERT queries, none of them cut below ``max_len``.

    Each query becomes ``[CLS] [Q] tokens [SEP]`` followed by [MASK] up to
    ``max(min_len, n + 3)`` (attention 0 on the masks, as in colbert-ai); a batch is then
    padded to its longest row with [PAD] (attention 0), which ColBERT's query encoder zeroes,
    so a query scores the same alone or in a batch with longer ones. ``tok`` is the
    checkpoint's Hugging Face tokenizer.
    """
    import torch

    if min_len < 4 or max_len < min_len:
        raise ConfigError(f"query length bounds must satisfy 4 <= min_len <= max_len, got "
                          f"{min_len}, {max_len}")
    pieces = tok(list(texts), add_special_tokens=False)["input_ids"]
    rows, masks = [], []
    for ids in pieces:
        ids = list(ids)[:max_len - 3]
        length = max(min_len, len(ids) + 3)
        real = [tok.cls_token_id, q_marker_id, *ids, tok.sep_token_id]
        rows.append(real + [tok.mask_token_id] * (length - len(real)))
        masks.append([1] * len(real) + [0] * (length - len(real)))
    width = max((len(r) for r in rows), default=min_len)
    ids_t = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    mask_t = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, m) in enumerate(zip(rows, masks, strict=True)):
        ids_t[i, :len(r)] = torch.tensor(r)
        mask_t[i, :len(m)] = torch.tensor(m)
    return ids_t, mask_t


def query_token_count(tok: Any, text: str) -> int:
    """Word pieces of ``text`` without special tokens (what :func:`fit_query_tensors` keeps)."""
    return len(tok(text, add_special_tokens=False)["input_ids"])


def _fitted_tensorize(qt: Any, batch_text: Sequence[str], bsize: int | None = None,
                      context: Any = None, full_length_search: bool = False,
                      min_len: int | None = None, max_len: int = QUERY_HARD_MAX) -> Any:
    """A drop-in for colbert-ai's ``QueryTokenizer.tensorize`` built on fit_query_tensors."""
    if context is not None:
        raise ConfigError("ColBERT queries with background context are not supported")
    from colbert.modeling.tokenization.utils import _split_into_batches

    ids, mask = fit_query_tensors(qt.tok, batch_text, min_len or qt.query_maxlen,
                                  qt.Q_marker_token_id, max_len)
    if bsize:
        return _split_into_batches(ids, mask, bsize)
    return ids, mask


def install_query_fit(query_tokenizer: Any, min_len: int, max_len: int = QUERY_HARD_MAX
                      ) -> None:
    """Make one colbert-ai QueryTokenizer fit queries instead of cutting them.

    ``max_len=min_len`` reproduces colbert-ai's cutting (for measurements).
    """
    def tensorize(batch_text: Sequence[str], bsize: int | None = None, context: Any = None,
                  full_length_search: bool = False) -> Any:
        return _fitted_tensorize(query_tokenizer, batch_text, bsize, context,
                                 full_length_search, min_len=min_len, max_len=max_len)

    query_tokenizer.tensorize = tensorize


@contextlib.contextmanager
def query_fit_for_training() -> Iterator[None]:
    """While it runs, every colbert-ai QueryTokenizer fits queries (used by training)."""
    from colbert.modeling.tokenization.query_tokenization import QueryTokenizer

    original = QueryTokenizer.tensorize
    QueryTokenizer.tensorize = _fitted_tensorize
    try:
        yield
    finally:
        QueryTokenizer.tensorize = original


# --------------------------------------------------------------------------------------------
# the retriever
# --------------------------------------------------------------------------------------------
# PLAID's candidate settings per k bucket: (largest k, settings); larger k gets a wide
# default. colbert-ai's own choice for these buckets:
COLBERT_AI_SETTINGS: tuple[tuple[int, dict[str, Any]], ...] = (
    (10, {"ncells": 1, "centroid_score_threshold": 0.5, "ndocs": 256}),
    (100, {"ncells": 2, "centroid_score_threshold": 0.45, "ndocs": 1024}),
)
# ambiqa's, chosen on 150 ASQA *train* questions over the 12.8k-passage `wiki` index (128-d
# trained checkpoint; benchmarks/results/colbert_search_settings.md): recall@5 was 0.893 for
# every ncells / threshold / ndocs <= 256 and 0.900 at ndocs 1024 for 3-4x the rank time, and
# recall@20 0.927 at ndocs 256 against 0.933 at 1024 for ~3x; so the cheapest setting of
# equal recall per bucket.
SEARCH_SETTINGS: tuple[tuple[int, dict[str, Any]], ...] = (
    (10, {"ncells": 1, "centroid_score_threshold": 0.5, "ndocs": 128}),
    (100, {"ncells": 2, "centroid_score_threshold": 0.45, "ndocs": 256}),
)


def _search_params(k: int, table: Sequence[tuple[int, dict[str, Any]]] | None = None
                   ) -> dict[str, Any]:
    """PLAID settings for a given k, set on every call.

    colbert-ai fills these in on the *first* search only and keeps them, so results would
    depend on the first call's k; setting them per call keeps every search reproducible.
    """
    for max_k, params in table or SEARCH_SETTINGS:
        if k <= max_k:
            return {**params, "ndocs": max(int(params["ndocs"]), 4 * k)}
    return {"ncells": 4, "centroid_score_threshold": 0.4, "ndocs": max(k * 4, 4096)}


class ColBERTRetriever(SharedResource):
    """A colbert-ai PLAID index opened for search (the Retriever protocol).

    The searcher (model + compressed index) loads on the first search, once, and every search
    runs under one lock: torch modules and colbert-ai's searcher config are not re-entrant.

    * ``search(query, k)`` returns the top ``k`` passages, best first, scored by ColBERT's
      MaxSim sum. If ``k`` is at least the number of indexed passages, every passage is scored
      exactly and all are returned (so ``len(result) == min(k, len(index))``).
    * A query is never cut below QUERY_HARD_MAX word pieces: the checkpoint's ``query_maxlen``
      (32) is the [MASK]-padded length of a short query and a longer one grows to fit (see
      :func:`fit_query_tensors`); only beyond QUERY_HARD_MAX is it cut, with a warning.
    * ``get(pid)`` takes a corpus passage id and returns the passage (score 0).
    """

    name = "colbert"

    def __init__(self, index_dir: Path, manifest: dict[str, Any],
                 passages: Sequence[Passage]) -> None:
        self.index_dir = Path(index_dir)
        self.index_name = self.index_dir.name
        self.manifest = manifest
        self._passages = list(passages)
        self._pid_of = {p.id: i for i, p in enumerate(self._passages)}
        self._lock = threading.Lock()
        self._searcher: Any = None
        self._min_query_len = int(manifest["query_maxlen"])
        self._max_query_tokens = QUERY_HARD_MAX - 3
        # PLAID settings per k bucket; None: SEARCH_SETTINGS (set_search_settings overrides)
        self.search_settings: tuple[tuple[int, dict[str, Any]], ...] | None = None

    # ---- construction ----------------------------------------------------------------------
    @classmethod
    def build(cls, passages: Iterable[Passage] | str | os.PathLike[str], index_root: Path,
              name: str, checkpoint: Path | None = None, nbits: int = 2, doc_maxlen: int = 180,
              nranks: int = 1, progress: bool = True, kmeans_share: float | None = None
              ) -> ColBERTRetriever:
        """Index ``passages`` (passage objects or a corpus JSONL path) as ``index_root/name``.

        An existing index of that name is replaced only once the new one is complete.
        ``checkpoint`` defaults to the MiniLM identity checkpoint. ``progress`` shows stage
        messages, a bar and elapsed time on stderr; colbert-ai's own output goes to
        ``colbert.log`` in the index either way.
        """
        from ambiqa.retrieval.checkpoint import checkpoint_info, identity_checkpoint

        _check_name(name)
        if nbits not in (1, 2, 4, 8):
            raise ConfigError(f"nbits must be 1, 2, 4 or 8, got {nbits!r}")
        if not isinstance(doc_maxlen, int) or not 8 <= doc_maxlen <= 512:
            raise ConfigError(f"doc_maxlen must be an integer in 8..512, got {doc_maxlen!r}")
        if not isinstance(nranks, int) or nranks < 1:
            raise ConfigError(f"nranks must be a positive integer, got {nranks!r}")
        if kmeans_share is not None and not 0.0 < kmeans_share <= 1.0:
            raise ConfigError(f"kmeans_share must be in (0, 1], got {kmeans_share!r}")
        index_root = Path(index_root).expanduser()
        if checkpoint is not None:
            checkpoint_info(checkpoint)  # a bad path fails before any work
        source = str(Path(passages).resolve()) if isinstance(passages, (str, os.PathLike)) \
            else "<passages>"

        index_root.mkdir(parents=True, exist_ok=True)
        _remove_stale_builds(index_root, name)
        tmp = index_root / f"{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir()
        t0 = time.perf_counter()
        try:
            n, sha = _write_collection(_passages_of(passages), tmp)
            ckpt = checkpoint_info(checkpoint if checkpoint is not None
                                   else identity_checkpoint())
            import_colbert()
            ckpt_meta = json.loads((Path(ckpt["path"]) / "artifact.metadata").read_text())
            with _captured_output(tmp / LOG_FILE) as terminal, warnings.catch_warnings(), \
                    _BuildProgress(n, nranks, terminal if progress else None,
                                   int(ckpt_meta.get("dim", 128)), kmeans_share) as bar:
                # colbert-ai's CUDA mixed-precision helpers warn on every CPU call.
                warnings.filterwarnings("ignore", category=FutureWarning)
                warnings.filterwarnings("ignore", message=".*CUDA is not available.*")
                _run_indexer(Path(ckpt["path"]), tmp, tmp / COLBERT_TSV, nbits, doc_maxlen,
                             nranks, kmeans_share)
            check_colbert_files(tmp, n)
            (tmp / COLBERT_TSV).unlink()
            shutil.rmtree(tmp / "colbert-run", ignore_errors=True)
            manifest = {
                "format": FORMAT_VERSION,
                "name": name,
                "corpus_sha256": sha,
                "n_passages": n,
                "source": source,
                "checkpoint": {"path": ckpt["path"], "kind": ckpt["kind"], "id": ckpt["id"]},
                "nbits": nbits,
                "doc_maxlen": doc_maxlen,
                "query_maxlen": int(ckpt_meta.get("query_maxlen", 32)),
                "dim": int(ckpt_meta.get("dim", 128)),
                "nranks": nranks,
                "kmeans_share": DEFAULT_KMEANS_SHARE if kmeans_share is None else kmeans_share,
                "centroids": _plan_partitions(tmp),
                "build_seconds": round(time.perf_counter() - t0, 2),
                "stage_seconds": bar.stage_seconds,
                "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "colbert_ai_version": colbert_version(),
                "ambiqa_version": _ambiqa_version(),
                "text_format": "title | text",
            }
            atomic_write_json(tmp / MANIFEST, manifest)  # last: only now is the build complete
            target = index_root / name
            _swap_into_place(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log.info("built ColBERT index %s (%d passages) in %.1f s", target, n,
                 manifest["build_seconds"])
        return cls.load(index_root, name)

    @classmethod
    def load(cls, index_root: Path, name: str,
             corpus: Iterable[Passage] | str | os.PathLike[str] | None = None
             ) -> ColBERTRetriever:
        """Open ``index_root/name``; the model loads on the first search.

        With ``corpus``, also check that the index was built from exactly that corpus (same
        ids, titles and texts in the same order) and raise :class:`IndexError_` if not.
        """
        _check_name(name)
        index_dir = Path(index_root).expanduser() / name
        manifest = read_manifest(index_dir)
        check_colbert_files(index_dir, manifest["n_passages"])
        passages = _read_collection(index_dir, manifest)
        if corpus is not None:
            check_corpus(manifest, corpus, index_dir)
        return cls(index_dir, manifest, passages)

    # ---- protocol ------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """Index name + corpus fingerprint + checkpoint id."""
        m = self.manifest
        return f"colbert:{self.index_name}:{m['corpus_sha256'][:16]}:{m['checkpoint']['id']}"

    def __len__(self) -> int:
        return len(self._passages)

    def search(self, query: str, k: int = 5) -> list[Passage]:
        query, k = check_query(query, k)
        with timed_search(self.name, query, k), self._lock:
            searcher = self._ensure_searcher()
            self._warn_if_truncated(searcher, query)
            q = searcher.checkpoint.queryFromText([query], to_cpu=True)
            return self._rank(searcher, q, k)

    def batch_search(self, queries: Sequence[str], k: int = 5, bsize: int = 32
                     ) -> list[list[Passage]]:
        """Search several queries, encoding them ``bsize`` at a time (for evaluation).

        The ranking is ``search``'s for each query; only the query encoding is batched (a
        padded batch can differ from a lone encoding in the last float bits, so a score tie
        may break the other way). Each query is timed and traced as one retriever call.
        """
        checked = [check_query(q, k) for q in queries]
        out: list[list[Passage]] = []
        for start in range(0, len(checked), bsize):
            chunk = checked[start:start + bsize]
            with self._lock:
                searcher = self._ensure_searcher()
                for q, _ in chunk:
                    self._warn_if_truncated(searcher, q)
                qs = searcher.checkpoint.queryFromText([q for q, _ in chunk], to_cpu=True)
            for (q, k_), row in zip(chunk, qs, strict=True):
                # drop the [PAD] rows a batch adds (zero vectors) so candidate generation
                # sees exactly the query's own vectors
                keep = int(row.norm(dim=-1).gt(0).nonzero().max()) + 1
                with timed_search(self.name, q, k_), self._lock:
                    out.append(self._rank(searcher, row[:keep].unsqueeze(0), k_))
        return out

    def get(self, pid: str) -> Passage | None:
        i = self._pid_of.get(pid)
        return None if i is None else self._passages[i]

    def warm(self) -> ColBERTRetriever:
        """Load the model and the compressed index now instead of on the first search."""
        with self._lock:
            self._ensure_searcher()
        return self

    # ---- internals -----------------------------------------------------------------------
    def _ensure_searcher(self) -> Any:
        if self._searcher is not None:
            return self._searcher
        from ambiqa.retrieval.checkpoint import checkpoint_info, identity_checkpoint

        import_colbert()
        ckpt = self.manifest["checkpoint"]
        path = Path(ckpt["path"])
        if not path.is_dir() and ckpt["kind"] == "identity":
            path = identity_checkpoint()  # the cache moved or was cleared: rebuild it
        try:
            info = checkpoint_info(path)
        except AmbiqaError as exc:
            raise IndexError_(f"index {self.index_dir} was built with checkpoint {path}, which "
                              f"is unusable: {exc.message}",
                              hint=f"restore the checkpoint or rebuild: "
                                   f"{_rebuild_hint(self.index_name)}") from exc
        if info["id"] != ckpt.get("id"):
            raise IndexError_(f"index {self.index_dir} was built with checkpoint {ckpt.get('id')}"
                              f" but {path} now holds {info['id']}",
                              hint=f"rebuild the index: {_rebuild_hint(self.index_name)}")
        from colbert.data import Collection
        from colbert.infra import Run, RunConfig
        from colbert.searcher import Searcher
        from colbert.utils.amp import MixedPrecisionManager

        log_path = self.index_dir / LOG_FILE
        try:
            log_fh: IO[str] = open(log_path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError:  # a read-only shared index
            log_fh = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
        run_config = RunConfig(nranks=1, gpus=0, avoid_fork_if_possible=True, amp=False)
        with log_fh, contextlib.redirect_stdout(log_fh), contextlib.redirect_stderr(log_fh), \
                warnings.catch_warnings(), Run().context(run_config):
            warnings.simplefilter("ignore")
            searcher = Searcher(index=self.index_name, index_root=str(self.index_dir.parent),
                                checkpoint=str(path), collection=Collection(data=self._passages),
                                verbose=0)
            # Mixed precision is a CUDA feature; on CPU it only warns on every call.
            searcher.checkpoint.amp_manager = MixedPrecisionManager(False)
            # Queries grow to fit instead of being cut; candidate generation reads the first
            # ``config.query_maxlen`` query vectors, so let it read them all.
            install_query_fit(searcher.checkpoint.query_tokenizer, self._min_query_len)
            searcher.config.query_maxlen = QUERY_HARD_MAX
        self._searcher = searcher
        return searcher

    def _warn_if_truncated(self, searcher: Any, query: str) -> None:
        tok = searcher.checkpoint.query_tokenizer.tok
        n = query_token_count(tok, query)
        if n > self._max_query_tokens:
            log.warning("query has %d tokens; ColBERT reads only the first %d: %.80r", n,
                        self._max_query_tokens, query)

    def _rank(self, searcher: Any, q: Any, k: int) -> list[Passage]:
        n = len(self._passages)
        if k >= n:
            pids, scores = self._score_all(searcher, q)
        else:
            searcher.configure(**_search_params(k, self.search_settings))
            pids, _, scores = searcher.dense_search(q, k)
            if len(pids) < k:  # too few candidates near the query's centroids: score all
                pids, scores = self._score_all(searcher, q)
        return [self._passages[pid].with_score(s) for pid, s in zip(pids[:k], scores[:k],
                                                                     strict=True)]

    def _score_all(self, searcher: Any, q: Any, chunk: int = 512) -> tuple[list[int], list[float]]:
        """Exact MaxSim scores for every passage, decompressed ``chunk`` passages at a time."""
        scored: list[tuple[float, int]] = []
        for start in range(0, len(self._passages), chunk):
            pids = list(range(start, min(start + chunk, len(self._passages))))
            got_pids, got_scores = searcher.ranker.rank(searcher.config, q, pids=pids)
            scored.extend(zip(got_scores, got_pids, strict=True))
        scored.sort(key=lambda t: (-t[0], t[1]))
        return [p for _, p in scored], [s for s, _ in scored]


def check_corpus(manifest: dict[str, Any], corpus: Iterable[Passage] | str | os.PathLike[str],
                 index_dir: Path) -> None:
    """Raise :class:`IndexError_` if ``corpus`` is not the corpus the index was built from."""
    sha = corpus_fingerprint(corpus)
    if sha != manifest["corpus_sha256"]:
        raise IndexError_(f"index {index_dir} was built from a different corpus "
                          f"(fingerprint {manifest['corpus_sha256'][:16]}, given corpus "
                          f"{sha[:16]})",
                          hint=f"rebuild it from this corpus: {_rebuild_hint(index_dir.name)}")


def build_index(corpus_path: str | os.PathLike[str], name: str,
                index_root: str | os.PathLike[str] | None = None,
                checkpoint: str | os.PathLike[str] | None = None,
                progress: bool = True, nranks: int = 1, kmeans_share: float | None = None,
                shards: int = 1) -> Any:
    """What ``ambiqa index CORPUS --name NAME`` runs: build, then print a summary.

    ``index_root`` defaults to ``$AMBIQA_INDEX_ROOT`` or ``$AMBIQA_CACHE/indexes``;
    ``checkpoint`` to :func:`~ambiqa.retrieval.checkpoint.default_checkpoint` (the trained
    checkpoint when it is in the cache, else the identity one). ``shards > 1`` splits the
    corpus into consecutive parts indexed one after another as ``NAME-0`` ... and records them
    in ``NAME.shards.json``; ``open_retriever("NAME")`` then searches all parts and merges by
    score. Each part is streamed from the file, so memory is bounded by one part.
    """
    from ambiqa.retrieval.checkpoint import default_checkpoint
    from ambiqa.retrieval.factory import index_root as default_root

    root = Path(index_root).expanduser() if index_root else default_root()
    ckpt = Path(checkpoint) if checkpoint else default_checkpoint()
    if not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"shards must be a positive integer, got {shards!r}")
    if shards > 1:
        from ambiqa.retrieval.sharded import build_sharded

        retriever = build_sharded(corpus_path, name, root, shards, checkpoint=ckpt,
                                  progress=progress, nranks=nranks, kmeans_share=kmeans_share)
        return retriever
    retriever = ColBERTRetriever.build(
        str(corpus_path), index_root=root, name=name, checkpoint=ckpt, progress=progress,
        nranks=nranks, kmeans_share=kmeans_share)
    if progress:
        from rich.console import Console

        m = retriever.manifest
        size = sum(f.stat().st_size for f in retriever.index_dir.iterdir() if f.is_file())
        Console(stderr=True).print(
            f"[green]indexed[/] {m['n_passages']:,} passages into {retriever.index_dir} in "
            f"{_fmt_seconds(m['build_seconds'])} ({size / 2**20:.1f} MiB, checkpoint "
            f"{m['checkpoint']['id']}, {m['checkpoint']['kind']})")
    return retriever


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _check_name(name: object) -> None:
    if not isinstance(name, str) or not _NAME_RE.match(name) or ".tmp-" in name \
            or ".old-" in name:
        raise ConfigError(f"invalid index name {name!r}",
                          hint="use letters, digits, '.', '_' and '-' (no slashes), "
                               "e.g. --name wiki")


def _write_collection(passages: Iterator[Passage], out: Path) -> tuple[int, str]:
    """Stream passages into ``collection.jsonl`` and colbert-ai's TSV; refuse bad corpora.

    Returns the passage count and the corpus sha256. Only the set of ids is held in memory.
    """
    check = PassageCheck()
    fp = _Fingerprint()
    n = 0
    with open(out / COLLECTION, "w", encoding="utf-8") as jsonl, \
            open(out / COLBERT_TSV, "w", encoding="utf-8") as tsv:
        for p in passages:
            check(n, p)
            fp.update(p)
            jsonl.write(json.dumps({"id": p.id, "title": p.title, "text": p.text},
                                   ensure_ascii=False) + "\n")
            # colbert-ai's TSV: pid, text, title -> "title | text"; tabs/newlines would split it
            text, title = _tsv_field(p.text), _tsv_field(p.title)
            tsv.write(f"{n}\t{text}\t{title}\n" if title else f"{n}\t{text}\n")
            n += 1
    if n == 0:
        raise DataError("the corpus is empty: nothing to index",
                        hint="pass a JSONL file with one {id, title, text} object per line")
    return n, fp.hexdigest()


def _plan_partitions(index_dir: Path) -> int | None:
    try:
        return int(json.loads((index_dir / "plan.json").read_text())["num_partitions"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _tsv_field(s: str) -> str:
    return " ".join(s.split())


def _swap_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished build to ``target``, replacing an older index only at the end."""
    old: Path | None = None
    if target.exists():
        old = target.with_name(f"{target.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
        os.rename(target, old)
    try:
        os.rename(tmp, target)
    except OSError:
        if old is not None:
            os.rename(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _remove_stale_builds(index_root: Path, name: str) -> None:
    """Delete ``name.tmp-PID-*`` / ``name.old-PID-*`` left by builds whose process is gone."""
    for d in index_root.glob(f"{name}.*-*-*"):
        m = re.fullmatch(re.escape(name) + r"\.(?:tmp|old)-(\d+)-[0-9a-f]+", d.name)
        if m and d.is_dir() and not _pid_alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ambiqa_version() -> str:
    from ambiqa import __version__

    return __version__


__all__ = ["ColBERTRetriever", "build_index", "fit_query_tensors", "QUERY_HARD_MAX",
           "corpus_fingerprint", "read_manifest", "validate_manifest", "check_corpus",
           "iter_corpus", "import_colbert"]
