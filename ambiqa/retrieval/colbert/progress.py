"""Output capture and the build's progress display.

:func:`captured_output` sends what colbert-ai, faiss and torch print (Python and C level) to a
log file; :class:`BuildProgress` shows stages, a passage bar and a rough up-front estimate
(:func:`estimate_build_seconds`); :class:`TrainingProgress` is the training run's bar with its
loss. The hooks that observe colbert-ai's stages live with the
other colbert-ai patches (:func:`ambiqa.retrieval.colbert.patches.build_progress_hooks`).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ambiqa.paths import cache_root
from ambiqa.retrieval.colbert.patches import (
    build_progress_hooks,
    kmeans_sample_size,
    partitions_for,
)

# Rough build-time model for the up-front estimate, fitted to the full 12.8k-passage build on
# 2 shared cores (setup 299 s, k-means 234 s, encode + compress 610 s): encoding costs ~15 ms
# per passage per pass (colbert-ai encodes each passage twice under ~30k passages); k-means
# (4 iterations over the sample) and compression (1 pass over every embedding) cost
# embeddings x centroids x dim multiply-adds at ~130 GFLOP/s. Passages average ~90 tokens.
ENCODE_SECONDS_PER_PASSAGE = 0.015
TOKENS_PER_PASSAGE = 90
FLOPS_PER_SECOND = 1.3e11
#: A build's fixed cost whatever its size -- starting colbert-ai and torch, loading the
#: checkpoint, planning, writing and checking the index. Without it a small build was
#: estimated at "~0 s" and took 39 s (issue 42). Not counted: compiling colbert-ai's C++
#: extensions on a machine's first build (minutes, once; the message says so separately).
STARTUP_SECONDS = 35.0


def extensions_built() -> bool:
    """Whether colbert-ai's C++ extensions look compiled already (a ``.so`` under
    ``TORCH_EXTENSIONS_DIR``, which :func:`~.patches.import_colbert` points at ambiqa's
    cache): if not, the first build or search on this machine compiles them (~30 s each)."""
    ext = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or cache_root() / "torch_extensions")
    return ext.is_dir() and any(ext.rglob("*.so"))


def estimate_build_seconds(n_passages: int, dim: int = 384,
                           kmeans_share: float | None = None) -> float:
    """A rough CPU build time for ``n_passages`` (for the user, not for decisions): the fixed
    start-up (:data:`STARTUP_SECONDS`), so it is never "~0 s", plus encoding and clustering."""
    sample = kmeans_sample_size(n_passages, kmeans_share)
    n_emb = n_passages * TOKENS_PER_PASSAGE
    partitions = partitions_for(n_emb, sample * TOKENS_PER_PASSAGE, kmeans_share)
    assignments = 4 * sample * TOKENS_PER_PASSAGE + n_emb  # k-means passes + compression
    clustering = assignments * partitions * dim * 2 / FLOPS_PER_SECOND
    return STARTUP_SECONDS + (sample + n_passages) * ENCODE_SECONDS_PER_PASSAGE + clustering


@contextlib.contextmanager
def captured_output(log_path: Path) -> Iterator[IO[str]]:
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


class BuildProgress:
    """Stage messages, elapsed time and a passage-level bar for a colbert-ai build.

    colbert-ai gives no callbacks, so for single-process builds the stages and the bar are
    observed through :func:`~ambiqa.retrieval.colbert.patches.build_progress_hooks` for the
    duration of the build only.
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
        self._hooks = contextlib.ExitStack()

    def __enter__(self) -> BuildProgress:
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
                          f"rough estimate ~{fmt_seconds(est)} on 2 free cores"
                          + ("" if extensions_built() else
                             ", plus a few minutes once to compile colbert-ai's C++ "
                             "extensions (the first time on this machine)"))
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
            self._hooks.enter_context(build_progress_hooks(
                list(self.STAGES), self._stage, self._stage_done, self._advance))
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.close()
        if self._progress is not None:
            if exc[0] is None:
                self._progress.update(self._task, completed=self.total, description="done")
            self._progress.stop()

    def _stage(self, stage: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=self.STAGES[stage])

    def _stage_done(self, stage: str, seconds: float) -> None:
        self.stage_seconds[stage] = round(seconds, 2)

    def _advance(self, n: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)


class TrainingProgress:
    """A rich progress bar with loss and ETA on the real terminal (colbert-ai's output is
    captured into the log)."""

    def __init__(self, total: int, done: int, enabled: bool) -> None:
        self.total, self.done, self.enabled = total, done, enabled
        self._progress: Any = None
        self._task: Any = None

    def start(self, stream: IO[str]) -> None:
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(TextColumn("training ColBERT"), BarColumn(),
                                  MofNCompleteColumn(), TextColumn("{task.fields[loss]}"),
                                  TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                  console=Console(file=stream))
        self._progress.start()
        self._task = self._progress.add_task("train", total=self.total, completed=self.done,
                                             loss="")

    def update(self, step: int, loss: float | None) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=step,
                                  loss=f"loss {loss:.3f}" if loss is not None else "")

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def fmt_seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"
