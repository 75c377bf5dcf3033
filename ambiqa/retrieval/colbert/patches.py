"""Everything ambiqa does to colbert-ai 0.2.22's internals, in one place: the pin's whole cost.

Each item below exists because colbert-ai 0.2.22 does not work, or works badly, on CPU with a
MiniLM checkpoint; an upgrade of colbert-ai is checked against this module and nothing else.

* :func:`import_colbert` -- import it once offline, undoing its process-wide side effects,
  and make its run metadata survive a detached-HEAD git checkout (:func:`safe_metadata`);
* :func:`colbert_fixes` -- the held-out residual sample cut to what ``torch.quantile``
  accepts, and the k-means sample / centroid count (:func:`kmeans_sample_size`);
* :func:`run_indexer` / :func:`encode_cpu_rank` -- the indexer on CPU settings and the
  ``torch.distributed`` gloo shim that lets several CPU ranks index;
* :func:`fit_query_tensors`, :func:`install_query_fit`, :func:`query_fit_for_training` --
  queries grow to fit instead of being cut at ``query_maxlen``;
* :func:`build_progress_hooks` -- the stage and batch hooks the progress bar observes;
* :func:`cpu_training` -- colbert-ai's training loop in one CPU process (its ``Trainer``
  spawns workers that wrap the model in ``DistributedDataParallel`` without a process group,
  which crashes on CPU while the parent waits forever).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import math
import os
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError, RetrievalIndexError
from ambiqa.paths import cache_root
from ambiqa.retrieval.colbert.devices import (
    compute_kmeans_on_gpu,
    faiss_has_gpu,
    run_config_kwargs,
    visible_gpus,
)

log = logging.getLogger(__name__)

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
            _install_safe_metadata()
        except ImportError as exc:
            raise RetrievalIndexError(f"colbert-ai cannot be imported: {exc}",
                                      hint="pip install colbert-ai==0.2.22 faiss-cpu") from exc
        finally:
            multiprocessing.set_start_method(previous_method, force=True)
            if previous_tok is None:
                os.environ.pop("TOKENIZERS_PARALLELISM", None)
            else:
                os.environ["TOKENIZERS_PARALLELISM"] = previous_tok
        _IMPORTED = True


def safe_metadata(original: Callable[[], Any]) -> Callable[[], Any]:
    """``get_metadata_only`` that never fails on the caller's git state.

    colbert-ai stamps every saved config and checkpoint with the git branch of the current
    directory and only catches "not a repository": inside a checkout on a detached HEAD (a
    worktree at a commit, most CI checkouts) ``active_branch`` raises ``TypeError`` and the
    save -- a training checkpoint included -- fails. Then the stamp goes without git fields.
    """
    def get_metadata_only() -> Any:
        try:
            return original()
        except (TypeError, ValueError, OSError) as exc:
            log.debug("colbert-ai metadata without git fields: %s", exc)
            from colbert.utils.utils import dotdict

            return dotdict(hostname=socket.gethostname(),
                           current_datetime=time.strftime("%b %d, %Y ; %l:%M%p %Z (%z)"),
                           cmd=" ".join(sys.argv))

    get_metadata_only.__wrapped__ = original  # type: ignore[attr-defined]
    return get_metadata_only


def _install_safe_metadata() -> None:
    """Replace ``get_metadata_only`` in every colbert-ai module that imported it by name."""
    import utility.utils.save_metadata as meta

    original = getattr(meta.get_metadata_only, "__wrapped__", meta.get_metadata_only)
    patched = safe_metadata(original)
    meta.get_metadata_only = patched
    for name, module in list(sys.modules.items()):
        if (name.startswith("colbert") and module is not None
                and getattr(module, "get_metadata_only", None) is original):
            module.get_metadata_only = patched


def colbert_version() -> str:
    try:
        return importlib.metadata.version("colbert-ai")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


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
def colbert_fixes(kmeans_share: float | None = None) -> Iterator[None]:
    """Patch colbert-ai's indexer for the duration of a build.

    * held-out residual sample cut to what ``torch.quantile`` accepts (large-dim checkpoints);
    * the k-means sample and the number of centroids (see :func:`kmeans_sample_size`);
    * on a GPU machine whose faiss has no GPU, k-means on the GPU
      (:func:`ambiqa.retrieval.colbert.devices.gpu_kmeans`); the CPU path is unchanged.
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
    import colbert.indexing.collection_indexer as collection_indexer

    kmeans = collection_indexer.compute_faiss_kmeans
    if visible_gpus() and not faiss_has_gpu():  # GPU k-means where faiss has no GPU
        collection_indexer.compute_faiss_kmeans = compute_kmeans_on_gpu
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(CollectionIndexer, name, fn)
        collection_indexer.compute_faiss_kmeans = kmeans


# --------------------------------------------------------------------------------------------
# multi-process CPU indexing
# --------------------------------------------------------------------------------------------
def encode_cpu_rank(config: Any, collection: Any, shared_lists: Any, shared_queues: Any,
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
        with colbert_fixes():
            encode(config, collection, shared_lists, shared_queues, verbose)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_indexer(checkpoint: Path, index_dir: Path, tsv: Path, nbits: int, doc_maxlen: int,
                 nranks: int, kmeans_share: float | None = None) -> None:
    """Run colbert-ai's indexer over ``tsv`` into ``index_dir`` (CPU settings)."""
    from colbert.indexer import Indexer
    from colbert.infra import ColBERTConfig, Run, RunConfig


    run_config = RunConfig(**run_config_kwargs(  # the GPUs torch sees, else the CPU
        nranks, root=str(index_dir), experiment="colbert-run", index_root=str(index_dir.parent)))
    with Run().context(run_config):
        config = ColBERTConfig(nbits=nbits, doc_maxlen=doc_maxlen, checkpoint=str(checkpoint),
                               index_path=str(index_dir))
        indexer = Indexer(checkpoint=str(checkpoint), config=config, verbose=1)
        if nranks == 1:
            with colbert_fixes(kmeans_share):
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
            Launcher(encode_cpu_rank).launch(indexer.config, str(tsv), shared_lists,
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
# progress hooks
# --------------------------------------------------------------------------------------------
@contextlib.contextmanager
def build_progress_hooks(stages: Sequence[str], on_stage: Callable[[str], None],
                         on_stage_done: Callable[[str, float], None],
                         on_advance: Callable[[int], None]) -> Iterator[None]:
    """Observe a single-process build: colbert-ai gives no callbacks.

    Wraps ``CollectionIndexer.<stage>`` for each of ``stages`` (``on_stage`` before,
    ``on_stage_done(stage, seconds)`` after) and ``Checkpoint.doc`` (one call per encoded batch;
    ``on_advance(batch size)``), and restores both when the block ends.
    """
    from colbert.indexing.collection_indexer import CollectionIndexer
    from colbert.modeling.checkpoint import Checkpoint

    patches: list[tuple[Any, str, Any]] = []

    def wrap_stage(owner: Any, stage: str) -> None:
        original = getattr(owner, stage)

        def wrapped(indexer: Any, *args: Any, **kwargs: Any) -> Any:
            on_stage(stage)
            t0 = time.perf_counter()
            try:
                return original(indexer, *args, **kwargs)
            finally:
                on_stage_done(stage, time.perf_counter() - t0)
                log.info("colbert stage %s took %.1f s", stage, time.perf_counter() - t0)

        patches.append((owner, stage, original))
        setattr(owner, stage, wrapped)

    try:
        for stage in stages:
            wrap_stage(CollectionIndexer, stage)
        original_doc = Checkpoint.doc

        def doc(ckpt: Any, *args: Any, **kwargs: Any) -> Any:
            out = original_doc(ckpt, *args, **kwargs)
            ids = args[0] if args else kwargs.get("input_ids")
            on_advance(int(ids.size(0)) if ids is not None else 0)
            return out

        patches.append((Checkpoint, "doc", original_doc))
        Checkpoint.doc = doc
        yield
    finally:
        for owner, attr, original in reversed(patches):
            setattr(owner, attr, original)


# --------------------------------------------------------------------------------------------
# training on CPU
# --------------------------------------------------------------------------------------------
def _pass_through_cls() -> Any:
    import torch

    class PassThrough(torch.nn.Module):
        """Stands in for DistributedDataParallel in a single CPU process."""

        def __init__(self, module: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__()
            self.module = module

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return self.module(*args, **kwargs)

    return PassThrough


@contextlib.contextmanager
def cpu_training(hook: Callable[..., None], record_scores: Callable[[Any], None],
                 restore_optimizer: Callable[[Any], None] | None = None) -> Iterator[None]:
    """While it runs, ``colbert.training.training.train`` works in this one CPU process.

    ``DistributedDataParallel`` becomes a pass-through module (no process group exists),
    colbert-ai's per-step ``manage_checkpoints`` becomes ``hook``, its ``print_progress``
    becomes ``record_scores``, its ``AdamW`` calls ``restore_optimizer(self)`` once built (a
    resumed run's moments), and queries grow to fit as at search time. All are restored after.
    """
    import torch
    from colbert.training import training as colbert_training

    saved = (torch.nn.parallel.DistributedDataParallel, colbert_training.manage_checkpoints,
             colbert_training.AdamW, colbert_training.print_progress)
    base_adamw = saved[2]

    class ResumableAdamW(base_adamw):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if restore_optimizer is not None:
                restore_optimizer(self)

    torch.nn.parallel.DistributedDataParallel = _pass_through_cls()
    colbert_training.manage_checkpoints = hook
    colbert_training.AdamW = ResumableAdamW
    colbert_training.print_progress = record_scores
    try:
        with query_fit_for_training():  # queries grow to fit, as at search time
            yield
    finally:
        (torch.nn.parallel.DistributedDataParallel, colbert_training.manage_checkpoints,
         colbert_training.AdamW, colbert_training.print_progress) = saved
