"""ColBERT (late interaction) retrieval with colbert-ai 0.2.22 on CPU.

ColBERT is the retriever the papers use. :meth:`ColBERTRetriever.build` indexes a corpus with
colbert-ai's PLAID indexer and :meth:`ColBERTRetriever.load` opens it for search; programs only
see the :class:`~ambiqa.retrieval.base.Retriever` protocol.

This module is the package's front; the work is split by concern:

* :mod:`.retriever` -- :class:`ColBERTRetriever` (load, search, get) (``ambiqa index`` builds
  through :func:`ambiqa.retrieval.indexing.build_index`, one index or a sharded one);
* :mod:`.build` -- the temporary-directory build and the swap into place;
* :mod:`.manifest` -- the manifest schema and its checks, the collection file, the corpus
  fingerprint;
* :mod:`.patches` -- every change ambiqa makes to colbert-ai 0.2.22's internals (the pin's
  whole cost in one place);
* :mod:`.progress` -- output capture, the progress bar and the build-time estimate;
* :mod:`.update` -- appending passages with colbert-ai's ``IndexUpdater`` (``ambiqa index
  add``, driven by :mod:`ambiqa.retrieval.adding`) and what it needs around it.

Import-time environment defaults (``OMP_WAIT_POLICY`` among them) are set in one place,
:mod:`ambiqa`'s ``__init__``, which always runs before this package; colbert-ai's own
environment is set when it is imported (:func:`~.patches.import_colbert`).

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

CPU settings (DESIGN.md): ``RunConfig(gpus=0, avoid_fork_if_possible=True, amp=False)``
(where torch sees GPUs, ``gpus`` is their count and colbert-ai runs on them: :mod:`.devices`),
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
``torch.distributed`` gloo shim in :mod:`.patches`, since colbert-ai only wires up NCCL). On
one machine this helps only with spare cores: encoding is CPU bound and torch already uses
every core in one process. A corpus that outgrows one machine's memory is split into shards
(``ambiqa index dump.jsonl --name wiki --shards N``, :mod:`ambiqa.retrieval.sharded`): each
shard is streamed from the file and built on its own (shards can be built on several machines
with one checkpoint), and ``open_retriever("wiki")`` searches them all and merges by score.
"""

from __future__ import annotations

from ambiqa.retrieval.colbert.manifest import (
    COLBERT_FILES,
    COLBERT_TSV,
    COLLECTION,
    FORMAT_VERSION,
    LOG_FILE,
    MANIFEST,
    MANIFEST_KEYS,
    check_colbert_files,
    check_corpus,
    corpus_fingerprint,
    iter_corpus,
    read_collection,
    read_manifest,
    validate_manifest,
)
from ambiqa.retrieval.colbert.patches import (
    QUANTILE_MAX_ELEMENTS,
    QUERY_HARD_MAX,
    colbert_version,
    fit_query_tensors,
    import_colbert,
    install_query_fit,
    kmeans_sample_size,
    limit_heldout,
    partitions_for,
    query_fit_for_training,
    query_token_count,
)
from ambiqa.retrieval.colbert.progress import captured_output, estimate_build_seconds
from ambiqa.retrieval.colbert.retriever import (
    COLBERT_AI_SETTINGS,
    SEARCH_SETTINGS,
    ColBERTRetriever,
)

__all__ = ["ColBERTRetriever", "fit_query_tensors", "QUERY_HARD_MAX",
           "corpus_fingerprint", "read_manifest", "validate_manifest", "check_corpus",
           "iter_corpus", "import_colbert", "install_query_fit", "query_fit_for_training",
           "query_token_count", "captured_output", "check_colbert_files", "read_collection",
           "colbert_version", "kmeans_sample_size", "partitions_for", "estimate_build_seconds",
           "limit_heldout", "QUANTILE_MAX_ELEMENTS", "COLBERT_FILES", "COLBERT_TSV",
           "COLLECTION", "FORMAT_VERSION", "LOG_FILE", "MANIFEST", "MANIFEST_KEYS",
           "SEARCH_SETTINGS", "COLBERT_AI_SETTINGS"]
