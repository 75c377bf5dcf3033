"""Compiled-program artifacts: one JSON file, DSPy state plus a manifest. Never a pickle.

Layout::

    {
      "format": "ambiqa-artifact",
      "schema_version": 1,
      "manifest": {program, program_config, ambiqa_version, dspy_version, lm, retriever,
                   metric, reader, train, dev, scores, optimizer, created, compile_cost},
      "state": <program.dump_state(): per-predictor demos, instructions, fields>
    }

Loading is transactional: the file is parsed and validated, a fresh program is built and the
state is loaded into it, and only then is it returned, so an error at any step leaves nothing
half-loaded. Writing is atomic (temp file + rename), so a killed compile never leaves a
truncated artifact behind.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from ambiqa.errors import ArtifactError, ConfigError
from ambiqa.fsutil import atomic_write_json

log = logging.getLogger(__name__)

FORMAT = "ambiqa-artifact"
SCHEMA_VERSION = 1
REQUIRED_MANIFEST_KEYS = ("program", "program_config", "ambiqa_version", "lm", "retriever",
                          "metric", "optimizer", "created")
TOP_LEVEL_KEYS = {"format", "schema_version", "manifest", "state"}


def write_json(path: Path, obj: Any) -> None:
    """Atomically write ``obj``; an OS failure (disk full, no permission) becomes a clear
    :class:`ArtifactError`, and the previous file, if any, is left as it was."""
    try:
        atomic_write_json(path, obj)
    except OSError as exc:
        raise ArtifactError(f"cannot write {path}: {exc.strerror or exc}",
                            hint="check the directory exists, is writable and has space") from exc


def save_artifact(path: str | os.PathLike[str], program: Any, manifest: dict[str, Any]) -> Path:
    """Serialize ``program``'s DSPy state with ``manifest`` into one JSON artifact."""
    missing = [k for k in REQUIRED_MANIFEST_KEYS if k not in manifest]
    if missing:
        raise ArtifactError(f"manifest is missing {', '.join(missing)}")
    state = program.dump_state()
    doc = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "manifest": manifest,
           "state": state}
    try:
        json.dumps(doc)
    except (TypeError, ValueError) as exc:
        raise ArtifactError(f"program state is not JSON-serializable: {exc}") from exc
    path = Path(path)
    write_json(path, doc)
    return path


def read_artifact(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse and validate an artifact file; raise :class:`ArtifactError` with the reason."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"artifact not found: {path}",
                            hint="compile one with `ambiqa compile PROGRAM --train ...`")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{path} is not UTF-8 text (is it a binary file?)") from exc
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                            f"{exc.msg})", hint="re-create it with `ambiqa compile`") from exc
    validate_artifact(doc, path)
    return doc


def validate_artifact(doc: Any, path: Path | str = "<artifact>") -> None:
    if not isinstance(doc, dict):
        raise ArtifactError(f"{path}: an artifact is a JSON object, found {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise ArtifactError(f"{path}: not an ambiqa artifact (format={doc.get('format')!r})")
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ArtifactError(
            f"{path}: schema version {version!r} is not supported (this ambiqa reads "
            f"{SCHEMA_VERSION})", hint="re-compile the program with this version of ambiqa")
    extra = set(doc) - TOP_LEVEL_KEYS
    missing = TOP_LEVEL_KEYS - set(doc)
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing keys {sorted(missing)}")
        if extra:
            parts.append(f"unexpected keys {sorted(extra)}")
        raise ArtifactError(f"{path}: " + "; ".join(parts))
    manifest = doc["manifest"]
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{path}: manifest must be an object")
    missing_m = [k for k in REQUIRED_MANIFEST_KEYS if k not in manifest]
    if missing_m:
        raise ArtifactError(f"{path}: manifest is missing {', '.join(missing_m)}")
    if not isinstance(doc["state"], dict):
        raise ArtifactError(f"{path}: state must be an object")


def load_program_state(program: Any, state: dict[str, Any], path: Path | str = "<artifact>",
                       ) -> None:
    """Load DSPy state into ``program``, keeping each predictor's signature name.

    DSPy rebuilds a signature from saved state as an anonymous ``StringSignature``; ambiqa's
    cost traces and exports name predictors by their signature class, so the name is restored.
    """
    names = {n: p.signature.__name__ for n, p in program.named_predictors()}
    try:
        program.load_state(state)
    except Exception as exc:  # DSPy raises various errors on a state that does not fit
        raise ArtifactError(f"{path}: state does not fit program "
                            f"{type(program).__name__}: {exc}") from exc
    for name, predictor in program.named_predictors():
        if name in names:
            predictor.signature.__name__ = names[name]


def load_artifact(path: str | os.PathLike[str], *, retriever: Any = None, lm: Any = None,
                  strict_fingerprint: bool = False) -> Any:
    """Build the compiled program described by an artifact, ready to call.

    ``retriever``: pass one to override the index named in the manifest; otherwise the index
    is opened by name. A retriever whose fingerprint differs from the one the program was
    compiled against gets a warning (or an error with ``strict_fingerprint``): the demos
    still work, but scores in the manifest no longer describe this set-up.
    ``lm``: if given, it is configured as DSPy's LM (with ambiqa tracing).
    """
    from ambiqa.programs.registry import build_program

    doc = read_artifact(path)
    manifest = doc["manifest"]
    program_name = manifest["program"]
    config = manifest.get("program_config") or {}
    if not isinstance(config, dict):
        raise ArtifactError(f"{path}: program_config must be an object")
    try:
        from ambiqa.programs.registry import program_class

        cls = program_class(program_name)
    except ConfigError as exc:
        raise ArtifactError(f"{path}: {exc.message}", hint=exc.hint) from exc
    info = manifest.get("retriever") or {}
    if retriever is None and getattr(cls, "needs_retriever", True) and info.get("index"):
        from ambiqa.retrieval.factory import open_retriever

        retriever = open_retriever(info)
    if retriever is not None and info.get("fingerprint"):
        have = getattr(retriever, "fingerprint", None)
        if have and have != info["fingerprint"]:
            msg = (f"{path}: compiled against index {info['fingerprint']}, "
                   f"but the retriever at hand is {have}")
            if strict_fingerprint:
                raise ArtifactError(msg, hint="rebuild the index from the same corpus or recompile")
            log.warning(msg)
    program = build_program(program_name, retriever=retriever, **config)
    load_program_state(program, doc["state"], path)
    program.manifest = manifest
    if lm is not None:
        from ambiqa.lm import configure

        configure(lm)
    return program
