"""Appending passages to a ColBERT index with colbert-ai 0.2.22's ``IndexUpdater`` (issue 43
item 2; :mod:`ambiqa.retrieval.adding` copies the index, calls :func:`append_passages` on the
copy, writes the manifest and swaps the copy in).

What the updater needs around it, found on CPU here (an add was not run where colbert-ai
searches on a GPU):

* its IVF consistency assert fails on every index colbert-ai builds: ``optimize_ivf`` saves the
  centroid -> pid lists padded by the longest list's length (room for a strided view) and the
  updater expects them unpadded; the padding is cut before the add and put back after, as
  ``optimize_ivf`` writes it;
* ``persist_to_disk`` adds the *total* embedding count to ``metadata.json``'s
  ``num_embeddings`` (it doubles); it is rewritten from the doclens;
* it writes in place, and prints: here it runs on a copy of the index (:func:`copy_index`:
  the files it writes copied, the others hard-linked), its output in the index's
  ``colbert.log``.

The new passages are encoded with the index's checkpoint and compressed with its existing
centroids and residual buckets, which are not retrained: right for additions that resemble the
corpus. After adds that change the corpus a lot, rebuild to retrain them (the manifest's
``additions`` say how many passages came after the build). Replacing a passage is not offered:
the updater's ``remove`` leaves a dead pid in place of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from ambiqa.errors import RetrievalIndexError
from ambiqa.fsutil import atomic_write_json
from ambiqa.jsonio import read_json
from ambiqa.retrieval.colbert.manifest import COLLECTION, LOG_FILE
from ambiqa.retrieval.colbert.retriever import ColBERTRetriever
from ambiqa.types import Passage


def colbert_text(p: Passage) -> str:
    """The text colbert-ai indexes for ``p``: what its TSV loader makes of the build's line
    (``title | text``, whitespace folded)."""
    text, title = " ".join(p.text.split()), " ".join(p.title.split())
    return f"{title} | {text}" if title else text


def copy_index(src: Path, dst: Path) -> None:
    """The files of the index ``src`` into the empty directory ``dst``: a real copy of each
    file the updater or :func:`append_passages` writes in place (the metadata, the IVF, the
    last chunk, the collection, the log), a hard link for the rest (centroids, buckets, earlier
    chunks: only read), so a large index is not copied whole. Hidden files are left out."""
    meta = read_json(src / "metadata.json", error=RetrievalIndexError)
    last = int(meta["num_chunks"]) - 1
    written = {"metadata.json", "ivf.pid.pt", COLLECTION, LOG_FILE, f"{last}.codes.pt",
               f"{last}.residuals.pt", f"doclens.{last}.json", f"{last}.metadata.json"}
    for f in src.iterdir():
        if not f.is_file() or f.name.startswith("."):
            continue
        if f.name not in written:
            try:
                os.link(f, dst / f.name)
                continue
            except OSError:  # no hard links here: copy
                pass
        shutil.copy2(f, dst / f.name)


def append_passages(index_dir: Path, manifest: dict[str, Any], old: Sequence[Passage],
                    new: Sequence[Passage]) -> None:
    """Encode ``new`` and append it to the colbert-ai index in ``index_dir`` (a copy: written in
    place) and to its ``collection.jsonl``. The manifest is the caller's to write."""
    copy = ColBERTRetriever(index_dir, manifest, old)
    searcher = copy.warm()._searcher  # checkpoint checked and resolved as for a search
    from colbert.index_updater import IndexUpdater

    log_path = index_dir / LOG_FILE
    try:
        log_fh: IO[str] = open(log_path, "a", encoding="utf-8")  # noqa: SIM115
    except OSError:
        log_fh = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    with log_fh, contextlib.redirect_stdout(log_fh), contextlib.redirect_stderr(log_fh), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        updater = IndexUpdater(searcher.config, searcher, str(copy.checkpoint_dir))
        used = int(updater.curr_ivf_lengths.sum())
        updater.curr_ivf = updater.curr_ivf[:used]  # optimize_ivf's padding (see above)
        updater.add([colbert_text(p) for p in new])
        updater.persist_to_disk()
    _fix_metadata(index_dir, len(old) + len(new))
    _pad_ivf(index_dir)
    with open(index_dir / COLLECTION, "a", encoding="utf-8") as fh:
        for p in new:
            fh.write(json.dumps({"id": p.id, "title": p.title, "text": p.text},
                                ensure_ascii=False) + "\n")


def _fix_metadata(index_dir: Path, n_passages: int) -> None:
    """``num_embeddings`` and ``avg_doclen`` from the chunks' doclens (persist_to_disk adds the
    total to the old count)."""

    meta = read_json(index_dir / "metadata.json", error=RetrievalIndexError)
    total = 0
    for i in range(int(meta["num_chunks"])):
        total += sum(read_json(index_dir / f"doclens.{i}.json", error=RetrievalIndexError,
                               max_bytes=None))
    meta["num_embeddings"] = total
    meta["avg_doclen"] = total / n_passages
    atomic_write_json(index_dir / "metadata.json", meta)


def _pad_ivf(index_dir: Path) -> None:
    """Save ``ivf.pid.pt`` padded as colbert-ai's ``optimize_ivf`` does (a fresh build's
    layout)."""
    import torch  # colbert-ai's tensors

    path = index_dir / "ivf.pid.pt"
    ivf, lengths = torch.load(path, map_location="cpu", weights_only=True)
    max_stride = int(lengths.max().item())
    offsets = torch.cat((torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, dim=0)))
    if offsets[-2] + max_stride > ivf.size(0):
        ivf = torch.cat((ivf, torch.zeros(max_stride, dtype=ivf.dtype)))
    torch.save((ivf, lengths), path)
