"""The run directory: what a run is (``run.json``), its rows (``results.jsonl``) and the
checks that refuse to mix or overwrite runs.

Split from :mod:`ambiqa.evaluation.runs.runner` (which re-exports every name here): these are the
on-disk contract a resumed run, ``ambiqa report`` and ``ambiqa compare`` rely on, and the CLI
calls :func:`check_run_dir` before loading any model. Both files only ever gain fields, so runs
written by an older ambiqa resume and render with a newer one.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.errors import ArtifactError, ConfigError
from ambiqa.fsutil import atomic_write_json, atomic_write_text
from ambiqa.jsonio import depth_ok, read_json
from ambiqa.lm.redact import endpoint_host


@dataclass
class RunSpec:
    """What a run is; stored as ``run.json``. Fields after ``lm`` are optional additions and
    are left out of the file when unset, so older run directories stay byte-compatible."""

    program: str
    data: str
    metrics: list[str]
    reader: str | None = None
    lm: str | None = None
    index: str | None = None
    program_config: dict[str, Any] | None = None
    judge: str | None = None
    #: sha256 of the artifact file when the program came from one
    artifact_sha256: str | None = None
    #: the retriever's own fingerprint (its passages and settings), beyond the index name
    index_fingerprint: str | None = None
    #: the LM's generation settings and endpoint (scheme://host[:port]/path, no credentials):
    #: each changes answers, so a resume must share them (filled from the configured LM by
    #: :func:`lm_settings` when the caller leaves them unset)
    max_tokens: int | None = None
    temperature: float | None = None
    endpoint: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: not stored: the defaults of the program's settings, given by the caller (who knows the
    #: programs; this module does not), so a resume accepts a setting added since the run was
    #: stored at its default value (:func:`spec_differences`)
    program_defaults: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    _OPTIONAL = ("index", "program_config", "judge", "artifact_sha256", "index_fingerprint",
                 "max_tokens", "temperature", "endpoint")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"program": self.program, "data": self.data,
                               "metrics": list(self.metrics), "reader": self.reader,
                               "lm": self.lm}
        for key in self._OPTIONAL:
            value = getattr(self, key)
            if value not in (None, {}):
                out[key] = value
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """Read a ``run.json`` of any ambiqa version (unknown keys are kept in ``extra``)."""
        known = {"program", "data", "metrics", "reader", "lm", *cls._OPTIONAL}
        return cls(program=str(data.get("program", "")), data=str(data.get("data", "")),
                   metrics=[str(x) for x in data.get("metrics", []) or []],
                   reader=data.get("reader"), lm=data.get("lm"), index=data.get("index"),
                   program_config=data.get("program_config"), judge=data.get("judge"),
                   artifact_sha256=data.get("artifact_sha256"),
                   index_fingerprint=data.get("index_fingerprint"),
                   max_tokens=data.get("max_tokens"), temperature=data.get("temperature"),
                   endpoint=data.get("endpoint"),
                   extra={k: v for k, v in data.items() if k not in known})

    @property
    def dataset(self) -> str:
        """The data spec without its example count (``asqa:dev:50`` -> ``asqa:dev``)."""
        return _base(self.data)


class ResultsFile:
    """Append-only JSONL writer that never leaves a partial line behind on a kill."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        #: set by :func:`prepare_run_dir`: a resume asking for fewer examples than the run
        #: holds (rows past its count are the run's own, not stale)
        self.narrowed = False

    def read(self) -> list[dict[str, Any]]:
        """The rows, one per example id (a later row for the same id replaces the earlier).

        Every row is validated (:func:`check_row`); a bad row anywhere but a torn last line
        (a kill mid-write: no final newline, that example is simply redone) raises an
        :class:`ArtifactError` naming its line number, so a report never counts n = 19 of 20
        without a word."""
        if not self.path.exists():
            return []
        rows: dict[str, dict[str, Any]] = {}
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise ArtifactError(f"cannot read {self.path}: {exc.strerror or exc}") from exc
        lines = data.split(b"\n")
        torn = len(lines) - 1 if lines[-1].strip() else None  # no final newline
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                row = check_row(raw)
            except ArtifactError as exc:
                if number - 1 == torn:
                    continue
                raise ArtifactError(
                    f"{self.path} line {number}: {exc.message}",
                    hint=f"repair or delete line {number} (then rerun with --resume to redo "
                         "that example)") from exc
            rows.pop(str(row["id"]), None)
            rows[str(row["id"])] = row
        return list(rows.values())

    def repair(self) -> None:
        """Drop a torn final line (killed mid-write) so appends start on a clean line."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_bytes(data[:cut])
            os.replace(tmp, self.path)

    def drop(self, ids: set[str], keep_in: Path) -> None:
        """Remove the rows of ``ids`` from the file (atomically rewritten) after appending
        them to ``keep_in``, so a row dropped as stale is set aside, never destroyed."""
        rows = self.read()
        gone = [r for r in rows if str(r["id"]) in ids]
        if not gone:
            return
        try:
            with open(keep_in, "a", encoding="utf-8") as fh:
                fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in gone))
                fh.flush()
                os.fsync(fh.fileno())
            atomic_write_text(self.path, "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                                 for r in rows if str(r["id"]) not in ids))
        except OSError as exc:
            raise write_error(self.path, exc) from exc

    def append(self, row: dict[str, Any]) -> None:
        """Append one row durably; a failed write (disk full, lost permission) stops the run
        with an :class:`ArtifactError`. Rows already in the file stay; a torn last line is
        dropped by :meth:`repair` on resume."""
        line = json.dumps(row, ensure_ascii=False) + "\n"
        try:
            with self._lock, open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise write_error(self.path, exc) from exc


#: deepest JSON nesting a results row may have (rows are a few levels deep; a deeper one is
#: damage or an attack, and would end in a RecursionError deep inside json or a report)
MAX_ROW_DEPTH = 64


def json_depth_ok(raw: bytes | str, limit: int) -> bool:
    """Whether ``raw`` JSON nests at most ``limit`` deep (:func:`ambiqa.jsonio.depth_ok`,
    kept under this name for callers of older versions)."""
    return depth_ok(raw, limit)


def read_run_json(path: Path, consequence: str, *, hint: str | None = None) -> dict[str, Any]:
    """A run's ``run.json`` (or ``summary.json``) through the guarded reader
    (:func:`ambiqa.jsonio.read_json`): too big, too deep, not JSON or not an object is an
    :class:`ArtifactError` saying what is refused (``consequence``)."""
    tail = f"; {consequence}" if consequence else ""
    try:
        data = read_json(path, error=ArtifactError, max_depth=MAX_ROW_DEPTH, what="run file")
    except ArtifactError as exc:
        raise ArtifactError(f"unreadable run file: {exc.message}{tail}", hint=hint) from exc
    if not isinstance(data, dict):
        raise ArtifactError(f"{path}: a JSON object was expected, got {type(data).__name__}"
                            f"{tail}", hint=hint)
    return data


def check_row(raw: bytes | str) -> dict[str, Any]:
    """One ``results.jsonl`` line parsed and checked: an object with an ``id``, ``metrics``
    an object of numbers, ``error`` a string or null, ``cost`` an object. Raises
    :class:`ArtifactError` with what is wrong (the caller adds the line number)."""
    if not depth_ok(raw, MAX_ROW_DEPTH):
        raise ArtifactError(f"the row nests deeper than {MAX_ROW_DEPTH} levels")
    try:
        row = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ArtifactError(f"not a JSON row ({str(exc)[:80]})") from exc
    if not isinstance(row, dict):
        raise ArtifactError(f"a row must be a JSON object, got {type(row).__name__}")
    if "id" not in row or not isinstance(row["id"], str | int) or isinstance(row["id"], bool):
        raise ArtifactError("the row has no string 'id'")
    metrics = row.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, dict):
            raise ArtifactError(f"'metrics' must be an object of numbers, got "
                                f"{type(metrics).__name__}")
        for name, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ArtifactError(f"metric {name!r} must be a number, got {str(value)[:40]!r}")
    if row.get("error") is not None and not isinstance(row["error"], str):
        raise ArtifactError("'error' must be a string or null")
    for key in ("cost", "prediction", "scoring_cost"):
        if row.get(key) is not None and not isinstance(row[key], dict):
            raise ArtifactError(f"{key!r} must be an object, got {type(row[key]).__name__}")
    return row


def example_sha(example: Any) -> str:
    """A short hash of one example's data row (question, gold answers, every field), so a
    resume can tell that the data file changed under a recorded row."""
    import hashlib

    try:
        fields = example.toDict() if hasattr(example, "toDict") else dict(example)
    except (TypeError, ValueError):
        fields = {"question": str(getattr(example, "question", example))}
    text = json.dumps(fields, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


#: run.json keys naming the data a run was made from: ``data_sha`` (:func:`data_fingerprint`
#: of every row the data spec names, before ``--part`` slices it) and ``data_rows`` (how many).
#: Not resume settings -- a resume after the data changed runs the changed rows again and
#: drops the deleted ones, then records the new values; ``ambiqa merge`` refuses parts whose
#: values differ (they were made from different versions of the data).
DATA_KEYS = ("data_sha", "data_rows")


def data_fingerprint(examples: list[Any]) -> dict[str, Any]:
    """``{"data_sha", "data_rows"}`` of the data rows ``examples``: a hash over each row's
    :func:`example_sha` in data order, so an edited, deleted, added or moved row changes it."""
    import hashlib

    h = hashlib.sha256()
    for ex in examples:
        h.update(example_sha(ex).encode("ascii") + b"\n")
    return {"data_sha": h.hexdigest()[:16], "data_rows": len(examples)}


def planned_rows(run: dict[str, Any]) -> int | None:
    """How many questions the run recorded in ``run`` (a run.json) set out to answer: its
    part's ids, else ``data_rows``, else the count of its data spec; None when unknown (a
    whole file recorded by an ambiqa before ``data_rows``)."""
    ids = run.get("part_ids")
    if isinstance(ids, list):
        return len(ids)
    rows = run.get("data_rows")
    if isinstance(rows, int) and not isinstance(rows, bool):
        return rows
    count = _count(str(run.get("data", "")))
    return int(count) if count != float("inf") else None


def lm_settings(lm: Any) -> dict[str, Any]:
    """``max_tokens``, ``temperature`` and ``endpoint`` (without credentials) of a DSPy LM;
    keys whose value cannot be read are left out."""
    out: dict[str, Any] = {}
    if lm is None:
        return out
    kwargs = getattr(lm, "kwargs", None) or {}
    for key in ("max_tokens", "temperature"):
        value = kwargs.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = value
    engine = getattr(lm, "engine", None)
    inner = getattr(engine, "inner", engine)
    base = getattr(inner, "api_base", None) if inner is not None else None
    if base is None:
        base = kwargs.get("api_base")
    if isinstance(base, str) and base:
        out["endpoint"] = endpoint_host(base)
    return out


# ---- one writer per run directory ----------------------------------------------------------
LOCK_NAME = ".lock"
_HELD: dict[str, list[Any]] = {}  # resolved run dir -> [open lock file, holders in process]
_HELD_LOCK = threading.Lock()


def _holder(path: Path, wait_s: float = 2.0) -> str:
    """``pid N`` of the lock's holder. The holder writes its pid just after taking the lock,
    so a refused process that looks in between waits a moment for it."""
    import time

    end = time.monotonic() + wait_s
    while True:
        try:
            info = path.read_text(encoding="utf-8").split()
        except OSError:
            info = []
        if info and info[0].isdigit() and _alive(int(info[0])):  # not a dead holder's pid
            return f"pid {info[0]}"
        if time.monotonic() >= end:
            return "another process"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def lock_run_dir(out_dir: Path) -> Callable[[], None]:
    """Take the run directory's writer lock (``fcntl.flock`` on ``OUT/.lock``, holding the
    pid); return the function that releases it. The OS releases it when the process dies,
    however it dies, so a killed run never leaves a stale lock. A second process is refused
    with the holder's pid; within one process the lock is re-entrant (the CLI may take it
    before loading a model, the runner again around the run). Where ``fcntl`` is missing
    (Windows) no lock is taken."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux/macOS
        return lambda: None
    out_dir = Path(out_dir)
    key = str(out_dir.resolve())
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is not None:
            held[1] += 1
            return functools.partial(_release, key)
        path = out_dir / LOCK_NAME
        try:
            fh = open(path, "a+", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot create the lock file {path}: {exc.strerror or exc}",
                              hint="choose another --out") from exc
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            fh.close()
            raise ConfigError(
                f"{out_dir} is being written by {_holder(path)}; refusing a second writer "
                "(two runs on one --out would answer every question twice)",
                hint="wait for that run to finish (the lock goes when it ends, even if it is "
                     "killed), or choose another --out") from exc
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()} {socket.gethostname()}\n")
        fh.flush()
        _HELD[key] = [fh, 1]
    return functools.partial(_release, key)


def _release(key: str) -> None:
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] > 0:
            return
        del _HELD[key]
        fh = held[0]
    try:  # the pid stays in the file (harmless); closing the file drops the lock
        fh.close()
    except OSError:
        pass


def probe_run_lock(out_dir: Path) -> None:
    """Refuse now (before any model loads) if another process holds ``out_dir``'s lock."""
    if (Path(out_dir) / LOCK_NAME).exists():
        lock_run_dir(out_dir)()


def write_error(path: Path, exc: OSError) -> ArtifactError:
    """A one-line error for a failed write that says what was kept."""
    why = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
    return ArtifactError(f"cannot write {path}: {why}",
                         hint="free space or fix permissions, then rerun with --resume; every "
                              "row written before this one is kept")


def prepare_run_dir(out_dir: Path, spec: RunSpec | None, resume: bool) -> ResultsFile:
    """Check ``out_dir`` (:func:`check_run_dir`), record the run in ``run.json`` and return
    its results file: a resume repairs a torn last line and records settings the stored run
    lacked, or a larger example count of the same split."""
    ensure_writable_dir(out_dir)
    meta = out_dir / "run.json"
    results = ResultsFile(out_dir / "results.jsonl")
    old = check_run_dir(out_dir, spec, resume)
    if old is not None:
        results.repair()
        if spec is not None:
            new = spec.to_dict()
            results.narrowed = _count(spec.data) < _count(old.get("data", ""))
            if _count(spec.data) > _count(old.get("data", "")):
                # extended to more examples of the same split; a resume asking for fewer
                # keeps the larger spec, since results.jsonl still holds those examples
                merged = {**old, **new}
            else:  # settings an older run did not record are recorded now
                merged = {**old, **{k: v for k, v in new.items()
                                    if k not in old and v is not None}}
                if not results.narrowed:  # the data as it is now (changed rows are rerun)
                    merged.update({k: new[k] for k in DATA_KEYS if k in new})
            if merged != old:
                _write_json(meta, merged)
    elif spec is not None:
        _write_json(meta, spec.to_dict())
    return results


def check_run_dir(out_dir: Path, spec: RunSpec | None, resume: bool,
                  skip: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """Refuse what would mix or overwrite results; read-only, so the CLI can call it before
    loading any model. A resume must share program, split and every setting in
    :data:`RESUME_FIELDS` with ``run.json`` (``skip``: fields not known yet); the error names
    each difference. Returns the existing ``run.json`` content (None for a fresh dir)."""
    out_dir = Path(out_dir)
    meta = out_dir / "run.json"
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file, not a directory",
                          hint="choose another --out")
    if not meta.exists():
        results = out_dir / "results.jsonl"
        if spec is not None and results.exists() and results.stat().st_size > 0:
            raise ConfigError(f"{out_dir} holds results.jsonl but no run.json; refusing to "
                              "mix results with a run of unknown origin",
                              hint="choose another --out")
        return None
    old = read_run_json(meta, "refusing to touch this run", hint="choose another --out")
    if not resume:
        raise ConfigError(f"{out_dir} already holds a run",
                          hint="pass --resume to continue it, or choose another --out")
    if spec is not None and (old.get("program"), _base(old.get("data", ""))) != (
            spec.program, _base(spec.data)):
        raise ConfigError(
            f"{out_dir} holds a run of {old.get('program')} on {old.get('data')}, "
            f"not {spec.program} on {spec.data}; refusing to mix results",
            hint="choose another --out")
    probe_run_lock(out_dir)
    if spec is not None:
        diffs = spec_differences(old, spec, skip=skip)
        if diffs:
            raise ConfigError(
                f"cannot resume {out_dir}: its settings differ from this run's: "
                + "; ".join(diffs),
                hint="resume with the run's own settings (see its run.json), or choose "
                     "another --out")
    return old


#: settings a resumed run must share with the run it continues (run.json key -> label)
RESUME_FIELDS: dict[str, str] = {
    "lm": "LM", "reader": "reader", "index": "index", "index_fingerprint": "index fingerprint",
    "program_config": "program config", "artifact_sha256": "artifact hash",
    "metrics": "metric set", "judge": "judge", "max_tokens": "max tokens",
    "temperature": "temperature", "endpoint": "endpoint", "part": "part (--part I/N)",
}
#: fields older ambiqa versions did not record: a stored "none" there proves nothing either
#: way, so it is accepted (and the resumed run records the value)
_UNRECORDED_OK = frozenset({"index_fingerprint", "max_tokens", "temperature", "endpoint"})
#: fields known only once the LM is built: an early check (before any model loads) that has
#: no value for them yet leaves them to the runner's check
_KNOWN_LATE = frozenset({"max_tokens", "temperature", "endpoint"})


def spec_differences(old: dict[str, Any], spec: RunSpec,
                     skip: frozenset[str] = frozenset()) -> list[str]:
    """Each setting of ``spec`` that differs from the stored ``run.json`` (``old``), as
    ``label: stored X, now Y``. ``skip`` names fields not known yet (the CLI checks the cheap
    ones before loading a model, the rest once the reader and judge exist)."""
    new = spec.to_dict()
    out = []
    for key, label in RESUME_FIELDS.items():
        if key in skip:
            continue
        was, now = old.get(key), new.get(key)
        if key == "metrics":
            was, now = sorted(was or []), sorted(now or [])
        if was in ({}, []):
            was = None
        if was is None and key in _UNRECORDED_OK:
            continue
        if now in ({}, []):
            now = None
        if now is None and key in _KNOWN_LATE:
            continue
        if key == "program_config" and was and now:
            was = _with_added_defaults(spec.program_defaults, was, now)
        if was != now:
            out.append(f"{label}: stored {_show(was)}, now {_show(now)}")
    return out


def _with_added_defaults(defaults: dict[str, Any] | None, was: dict[str, Any],
                         now: dict[str, Any]) -> dict[str, Any]:
    """``was`` plus each setting a newer ambiqa added to the program since the run was
    stored, at its default value (``defaults``, the program's config defaults): a run made
    before the setting existed behaved as that default (e.g. ``answer_form="long"``), so
    resuming it is sound. A new setting at any other value still counts as a difference.
    Without ``defaults`` (an artifact, an unknown program) the stored settings are compared
    as they are."""
    if not defaults:
        return was
    filled = dict(was)
    for name, value in now.items():
        if name not in was and name in defaults and defaults[name] == value:
            filled[name] = value
    return filled


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return repr(value) if isinstance(value, str) else str(value)


def _write_json(path: Path, obj: Any) -> None:
    try:
        atomic_write_json(path, obj)
    except OSError as exc:
        raise write_error(path, exc) from exc


def ensure_writable_dir(out_dir: Path) -> None:
    """Create ``out_dir`` if needed and prove it takes a file; a clear ConfigError if not."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file, not a directory",
                          hint="choose another --out")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create run directory {out_dir}: "
                          f"{exc.strerror or exc}", hint="choose another --out") from exc
    _check_writable(out_dir)


def _check_writable(out_dir: Path) -> None:
    """Probe with a real file: ``os.access`` says yes to root even on a read-only mount."""
    try:
        fd, probe = tempfile.mkstemp(dir=out_dir, prefix=".write-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        why = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise ConfigError(f"run directory {out_dir} is not writable: {why}",
                          hint="choose another --out") from exc


def _count(data_spec: str) -> float:
    """The example count of a data spec (``asqa:dev:50`` → 50); a whole split counts as ∞."""
    tail = str(data_spec).rpartition(":")[2]
    return int(tail) if tail.isdigit() else float("inf")


def _base(data_spec: str) -> str:
    """A data spec without its trailing example count: ``asqa:dev:50`` → ``asqa:dev``.

    Resuming may extend a run to more examples of the same split, never mix two splits."""
    head, _, tail = str(data_spec).rpartition(":")
    return head if head and tail.isdigit() else str(data_spec)
