"""Reading the stored evaluation runs under ``benchmarks/results/`` (no LM call).

The scripts that report on stored runs (:mod:`benchmarks.guard_replay`,
:mod:`benchmarks.writer_length`) must find the same runs, the same artifacts and the same
references, and count words the same way: their numbers are read side by side, so the pieces
they share live here, once. A run directory is a ``run.json`` beside a ``results.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

#: the repository root (the scripts are run from it as ``python -m benchmarks.NAME``)
ROOT = Path(__file__).resolve().parents[1]
#: where stored runs and artifacts live, relative to the root
RESULTS = "benchmarks/results"
#: the data sets whose programs write long answers (ASQA's long-answer task)
LONG_ANSWER_DATA = ("asqa",)

#: data spec -> reference long answers by question id (a parameter, so tests pass fakes)
References = Callable[[str], dict[str, list[str]]]


def words(text: Any) -> int:
    """Length in words (whitespace-separated; None counts 0): one unit for answers, demos and
    references alike, so their lengths compare."""
    return len(str(text or "").split())


def rel(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` where it lies under it, else as given: reports name files
    the same way whichever checkout they run on."""
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def data_split(data: str) -> str:
    """``asqa:dev`` of ``asqa:dev:60``: runs on slices of one split share its references and are
    compared as runs on that split."""
    return ":".join(str(data).split(":")[:2])


def find_runs(results: Path, exclude: Iterable[str] = ()) -> list[Path]:
    """Run directories under ``results`` on a long-answer (ASQA) set, sorted; those under a
    top-level directory named in ``exclude`` are left out, not read (runs in progress)."""
    exclude = tuple(exclude)
    out = []
    for meta in sorted(results.rglob("run.json")):
        top = meta.parent.relative_to(results).parts
        if top and top[0] in exclude or not (meta.parent / "results.jsonl").is_file():
            continue
        spec = json.loads(meta.read_text("utf-8"))
        if str(spec.get("data", "")).split(":")[0] in LONG_ANSWER_DATA:
            out.append(meta.parent)
    return out


def find_artifact(program: str, root: Path) -> Path | None:
    """The artifact a run's ``program`` names, on this checkout (None if not stored): an
    absolute path written on another checkout is looked up again under ``benchmarks/results``."""
    path = Path(program)
    tries = [path] if path.is_absolute() else [root / path, path]
    marker = f"/{RESULTS}/"
    if marker in program:
        tries.append(root / RESULTS / program.split(marker, 1)[1])
    return next((p for p in tries if p.is_file()), None)


def answers_fingerprint(rows: Iterable[dict[str, Any]]) -> str:
    """sha256 of a run's (id, answer) pairs, order-free: two stored runs with the same answers
    (a run re-scored by another reader) are one run, listed once."""
    return hashlib.sha256(json.dumps(
        sorted((str(r["id"]), str((r.get("prediction") or {}).get("answer"))) for r in rows),
        ensure_ascii=False).encode()).hexdigest()


def load_references(data: str) -> dict[str, list[str]]:
    """ASQA reference long answers by question id (the whole split the data spec names)."""
    from ambiqa.data import load_dataset

    return {str(ex.id): list(ex.get("long_answers") or [])
            for ex in load_dataset(data_split(data))}


def cached_references(refs: References) -> References:
    """``refs`` read once per split: every run on a slice of a split asks for its references,
    and loading a data set is the slow part."""
    seen: dict[str, dict[str, list[str]]] = {}

    def get(data: str) -> dict[str, list[str]]:
        key = data_split(data)
        if key not in seen:
            seen[key] = refs(key)
        return seen[key]

    return get
