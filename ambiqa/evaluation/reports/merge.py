"""Merging the parts of one evaluation back into one run (``ambiqa merge``).

The parts come from ``ambiqa evaluate ... --part I/N`` (:mod:`ambiqa.evaluation.runs.parts`):
each records ``part`` (``"I/N"``) and ``part_ids`` (its example ids, in data order) in its
``run.json``.

``ambiqa merge RUN_DIR... --out DIR`` (:func:`merge_runs`) refuses parts made from different
versions of the data (each part records ``data_sha``, the fingerprint of every data row, and
``data_rows``), parts whose ``run.json`` differ in anything but the part (naming each
difference), parts of different N, missing or
repeated parts, rows outside a part's slice, overlapping rows and unfinished parts. It then
writes one run directory whose ``run.json`` is the one a single process would have written
and whose ``results.jsonl`` holds the rows in data order, so the summary (headline means,
bootstrap intervals — they resample rows in order — and cost) equals that of a
single-process run on the same questions; only wall-clock timings differ. Where the parts
came from is recorded in ``merge.json`` beside them, not in ``run.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ambiqa.errors import ArtifactError, ConfigError
from ambiqa.evaluation.reports.report import write_run_report
from ambiqa.evaluation.runs.parts import PART_KEYS, PartSpec, parse_part
from ambiqa.evaluation.runs.run_dir import (
    ResultsFile,
    ensure_writable_dir,
    read_run_json,
    write_error,
)
from ambiqa.fsutil import atomic_write_json, atomic_write_text

__all__ = ["merge_runs"]


@dataclass
class _Part:
    path: Path
    meta: dict[str, Any]
    part: PartSpec
    ids: list[str]
    rows: list[dict[str, Any]]


def _read_part(path: Path) -> _Part:
    path = Path(path)
    meta_path = path / "run.json"
    if not path.is_dir() or not meta_path.is_file():
        raise ConfigError(f"{path} is not a run directory (no run.json)",
                          hint="pass directories written by `ambiqa evaluate --part I/N`")
    meta = read_run_json(meta_path, "refusing to merge")
    if "part" not in meta:
        raise ConfigError(f"{path} was not run with --part (its run.json has no 'part')",
                          hint="merge only runs made with `ambiqa evaluate --part I/N`")
    part = parse_part(str(meta["part"]))
    ids = meta.get("part_ids")
    if not isinstance(ids, list):
        raise ArtifactError(f"{meta_path} has 'part' but no 'part_ids' list; refusing to "
                            "merge a part whose questions are unknown")
    return _Part(path, meta, part, [str(i) for i in ids],
                 ResultsFile(path / "results.jsonl").read())


def _show(value: Any) -> str:
    return "none" if value is None else json.dumps(value, sort_keys=True)


def _differences(parts: list[_Part]) -> list[str]:
    """Each run.json key (other than the part) whose value differs, with every part's value."""
    keys = sorted({k for p in parts for k in p.meta} - PART_KEYS)
    out = []
    for key in keys:
        values = [p.meta.get(key) for p in parts]
        if key == "metrics":
            values = [sorted(v or []) for v in values]
        if any(v != values[0] for v in values[1:]):
            shown = ", ".join(f"part {p.part} ({p.path}) {_show(v)}"
                              for p, v in zip(parts, values, strict=True))
            out.append(f"{key}: {shown}")
    return out


def _check_data(parts: list[_Part]) -> None:
    """Refuse parts made from different versions of the data (an edited, added or deleted
    row): their slices no longer tile one data set, so the merged run would hold rows of two
    versions (8 rows for a 7-row file). Parts written before the fingerprint was recorded
    carry none and are left to the other checks."""
    shas = {p.meta.get("data_sha") for p in parts}
    if len(shas) <= 1:
        return
    shown = "; ".join(f"part {p.part} ({p.path}): {p.meta.get('data_rows', '?')} rows, "
                      f"fingerprint {p.meta.get('data_sha') or 'none (older ambiqa)'}"
                      for p in parts)
    raise ConfigError(f"refusing to merge parts made from different versions of the data "
                      f"({shown})",
                      hint="rerun the parts made from the old data with --resume on the data "
                           "as it is now (changed rows are redone), then merge")


def _check(parts: list[_Part], allow_unfinished: bool) -> None:
    if not parts:
        raise ConfigError("nothing to merge", hint="pass the run directories of every part")
    _check_data(parts)
    diffs = _differences(parts)
    if diffs:
        raise ConfigError("refusing to merge parts whose run.json differ: " + "; ".join(diffs),
                          hint="merge parts of one command run with the same settings")
    ns = sorted({p.part.of for p in parts})
    if len(ns) > 1:
        raise ConfigError(f"parts split the questions differently (N = {ns})",
                          hint="merge parts made with the same --part I/N denominator")
    n = ns[0]
    seen: dict[int, Path] = {}
    for p in parts:
        if p.part.index in seen:
            raise ConfigError(f"part {p.part} given twice: {seen[p.part.index]} and {p.path}",
                              hint="pass each part's directory once")
        seen[p.part.index] = p.path
    missing = [f"{i}/{n}" for i in range(1, n + 1) if i not in seen]
    if missing:
        raise ConfigError(f"missing part(s) {', '.join(missing)}",
                          hint="run them with --part and merge all N parts")
    owner: dict[str, PartSpec] = {}
    for p in parts:
        for qid in p.ids:
            if qid in owner:
                raise ConfigError(f"question {qid} is in part {owner[qid]} and part {p.part}",
                                  hint="the parts overlap; were they run on the same data?")
            owner[qid] = p.part
    for p in parts:
        mine = set(p.ids)
        stray = [str(r["id"]) for r in p.rows if str(r["id"]) not in mine]
        if stray:
            where = {owner.get(s) for s in stray}
            raise ConfigError(
                f"{p.path} (part {p.part}) holds {len(stray)} row(s) outside its slice "
                f"(e.g. {stray[0]}, "
                + (f"which belongs to part {where.pop()})" if len(where) == 1
                   and None not in where else "not in any part)"),
                hint="the parts overlap; re-run that part into a fresh --out")
        if not allow_unfinished:
            done = {str(r["id"]) for r in p.rows}
            todo = [i for i in p.ids if i not in done]
            if todo:
                raise ConfigError(
                    f"part {p.part} ({p.path}) is unfinished: {len(todo)} of {len(p.ids)} "
                    f"questions have no row (e.g. {todo[0]})",
                    hint=f"finish it with `ambiqa evaluate ... --part {p.part} --resume`, "
                         "or pass --allow-unfinished to merge what exists")


def merge_runs(run_dirs: list[str | Path], out_dir: str | Path, *,
               allow_unfinished: bool = False, plots: bool = True) -> dict[str, Any]:
    """Merge the N parts of one evaluation into ``out_dir``; return its summary.

    ``out_dir`` must be new or empty: a merge never overwrites a run. See the module
    docstring for what is refused and what is written.
    """
    parts = sorted((_read_part(Path(d)) for d in run_dirs), key=lambda p: p.part.index)
    _check(parts, allow_unfinished)
    out = Path(out_dir)
    if any(out.resolve() == p.path.resolve() for p in parts):
        raise ConfigError(f"--out {out} is one of the parts", hint="choose a new directory")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} already exists and is not empty",
                          hint="choose a new directory; a merge never overwrites a run")
    ensure_writable_dir(out)
    rows: list[dict[str, Any]] = []
    for p in parts:  # part order, then data order within each part = data order
        by_id = {str(r["id"]): r for r in p.rows}
        rows.extend(by_id[i] for i in p.ids if i in by_id)
    meta = {k: v for k, v in parts[0].meta.items() if k not in PART_KEYS}
    provenance = {"parts": [{"part": str(p.part), "run_dir": str(p.path),
                             "questions": len(p.ids), "rows": len(p.rows)} for p in parts],
                  "rows": len(rows), "questions": sum(len(p.ids) for p in parts)}
    try:
        atomic_write_json(out / "run.json", meta)
        atomic_write_text(out / "results.jsonl",
                          "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        atomic_write_json(out / "merge.json", provenance)
    except OSError as exc:
        raise write_error(out, exc) from exc
    return write_run_report(out, plots=plots)
