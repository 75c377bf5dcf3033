"""Building a ColBERT index: stream the corpus, run colbert-ai, write the manifest, swap in.

A build writes into ``<name>.tmp-<pid>-<random>`` beside the target and renames it into place
at the end (:func:`ambiqa.fsutil.swap_dir_into_place`), so a killed build leaves only a
temporary directory (removed by the next build once its process is gone) and never a
half-built index under ``<name>``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import time
import warnings
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from ambiqa.checks import check_int
from ambiqa.errors import ConfigError, DataError, ModelError
from ambiqa.fsutil import atomic_write_json, swap_dir_into_place
from ambiqa.jsonio import read_json
from ambiqa.retrieval.base import PassageCheck
from ambiqa.retrieval.checkpoint import checkpoint_info, identity_checkpoint
from ambiqa.retrieval.colbert.manifest import (
    COLBERT_TSV,
    COLLECTION,
    FORMAT_VERSION,
    LOG_FILE,
    MANIFEST,
    CorpusFingerprint,
    check_colbert_files,
    check_name,
    passages_of,
)
from ambiqa.retrieval.colbert.patches import (
    DEFAULT_KMEANS_SHARE,
    colbert_version,
    import_colbert,
    run_indexer,
)
from ambiqa.retrieval.colbert.progress import BuildProgress, captured_output
from ambiqa.retrieval.integrity import FILES_KEY, record_files
from ambiqa.types import Passage
from ambiqa.version import __version__

log = logging.getLogger(__name__)


def build(passages: Iterable[Passage] | str | os.PathLike[str], index_root: Path, name: str,
          checkpoint: Path | None = None, nbits: int = 2, doc_maxlen: int = 180,
          nranks: int = 1, progress: bool = True, kmeans_share: float | None = None) -> Path:
    """Index ``passages`` (passage objects or a corpus JSONL path) as ``index_root/name``.

    An existing index of that name is replaced only once the new one is complete.
    ``checkpoint`` defaults to the MiniLM identity checkpoint. ``progress`` shows stage
    messages, a bar and elapsed time on stderr; colbert-ai's own output goes to
    ``colbert.log`` in the index either way.
    """

    check_name(name)
    if nbits not in (1, 2, 4, 8):
        raise ConfigError(f"nbits must be 1, 2, 4 or 8, got {nbits!r}")
    check_int("doc_maxlen", doc_maxlen, 8, maximum=512)
    check_int("nranks", nranks)
    if kmeans_share is not None and not 0.0 < kmeans_share <= 1.0:
        raise ConfigError(f"kmeans_share must be in (0, 1], got {kmeans_share!r}")
    index_root = Path(index_root).expanduser()
    if checkpoint is not None:
        checkpoint_info(checkpoint)  # a bad path fails before any work
    source = str(Path(passages).resolve()) if isinstance(passages, (str, os.PathLike)) \
        else "<passages>"

    index_root.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(index_root, name)
    tmp = index_root / f"{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    t0 = time.perf_counter()
    try:
        n, sha = write_collection(passages_of(passages), tmp)
        ckpt = checkpoint_info(checkpoint if checkpoint is not None
                               else identity_checkpoint())
        import_colbert()
        ckpt_meta = read_json(Path(ckpt["path"]) / "artifact.metadata", error=ModelError,
                              hint="pass a colbert-ai checkpoint directory (--checkpoint)")
        with captured_output(tmp / LOG_FILE) as terminal, warnings.catch_warnings(), \
                BuildProgress(n, nranks, terminal if progress else None,
                               int(ckpt_meta.get("dim", 128)), kmeans_share) as bar:
            # colbert-ai's CUDA mixed-precision helpers warn on every CPU call.
            warnings.filterwarnings("ignore", category=FutureWarning)
            warnings.filterwarnings("ignore", message=".*CUDA is not available.*")
            run_indexer(Path(ckpt["path"]), tmp, tmp / COLBERT_TSV, nbits, doc_maxlen,
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
            "centroids": plan_partitions(tmp),
            "build_seconds": round(time.perf_counter() - t0, 2),
            "stage_seconds": bar.stage_seconds,
            "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "colbert_ai_version": colbert_version(),
            "ambiqa_version": _ambiqa_version(),
            "text_format": "title | text",
        }
        # size + sha256 of each file, checked on open (issue 33; the log is appended to later)

        manifest[FILES_KEY] = record_files(tmp, {MANIFEST, LOG_FILE})
        atomic_write_json(tmp / MANIFEST, manifest)  # last: only now is the build complete
        target = index_root / name
        swap_dir_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("built ColBERT index %s (%d passages) in %.1f s", target, n,
             manifest["build_seconds"])
    return target


def write_collection(passages: Iterator[Passage], out: Path) -> tuple[int, str]:
    """Stream passages into ``collection.jsonl`` and colbert-ai's TSV; refuse bad corpora.

    Returns the passage count and the corpus sha256. Only the set of ids is held in memory.
    """
    check = PassageCheck()
    fp = CorpusFingerprint()
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


def plan_partitions(index_dir: Path) -> int | None:
    try:
        return int(json.loads((index_dir / "plan.json").read_text())["num_partitions"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _tsv_field(s: str) -> str:
    return " ".join(s.split())


def remove_stale_builds(index_root: Path, name: str) -> None:
    """Delete ``name.tmp-PID-*`` / ``name.old-PID-*`` left by builds whose process is gone."""
    for d in index_root.glob(f"{name}.*-*-*"):
        m = re.fullmatch(re.escape(name) + r"\.(?:tmp|old)-(\d+)-[0-9a-f]+", d.name)
        if m and d.is_dir() and not pid_alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ambiqa_version() -> str:
    return __version__
