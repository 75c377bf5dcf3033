"""The artifact manifest: one type that writes, reads and validates itself.

Every artifact (``ambiqa compile``, ``ambiqa tune``, ``ambiqa tune-eor``) carries a manifest:
what to build, who wrote it, what it was optimized for and how well it did. Writers build a
:class:`Manifest`; :func:`ambiqa.optimizers.artifact.save_artifact` writes
:meth:`Manifest.to_dict`; the loader reads it back with :meth:`Manifest.from_dict`, which
checks each field's type and names the field and the fix in one line. The JSON layout is
unchanged from the dicts the writers built by hand before (schema version 2; see
:mod:`ambiqa.optimizers.artifact`).

Fields (required first; the rest default to null when absent):

* ``program``, ``program_config`` -- what to build: the registry name and its settings;
* ``ambiqa_version``, ``dspy_version`` -- who wrote it (filled in by default);
* ``lm`` -- the LM id the demos were bootstrapped with;
* ``retriever`` -- ``{kind, index, fingerprint}`` of the index it was compiled over;
* ``metric``, ``reader`` -- what was optimized (and the D-F1 reader's name);
* ``optimizer`` -- the teleprompter (or tuner) and its settings, ``{"name": ..., ...}``;
* ``created`` -- an ISO timestamp (filled in by default);
* ``train``, ``dev`` -- data specs; ``scores`` -- ``{train, dev, ...}``;
* ``optuna`` -- ``{study, storage, trial, value, params}`` for tuned artifacts;
* ``demos_per_predictor``, ``compile_cost``, ``data_guard`` -- what the compile produced.

Keys a newer ambiqa writes that this one does not know are kept in ``extra`` (and written back
unchanged); reading them only logs a warning.
"""

from __future__ import annotations

import datetime as _dt
import logging
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ambiqa.errors import ArtifactError
from ambiqa.version import __version__

log = logging.getLogger(__name__)

#: manifest keys every artifact has, in the order they are written
REQUIRED_KEYS = ("program", "program_config", "ambiqa_version", "lm", "retriever", "metric",
                 "optimizer", "created")
#: keys that may be absent (read as null)
OPTIONAL_KEYS = ("dspy_version", "reader", "train", "dev", "scores", "optuna",
                 "demos_per_predictor", "compile_cost", "data_guard")
#: program_config keys that are not settings: the loader passes these itself
RESERVED_CONFIG_KEYS = frozenset({"retriever"})
#: what an artifact records about "no retriever"
NO_RETRIEVER: dict[str, Any] = {"kind": None, "index": None, "fingerprint": None}

_NONE = type(None)
#: key -> (allowed JSON types, what the error names)
_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "program": ((str,), "a program name"),
    "program_config": ((dict, _NONE), "an object of settings"),
    "ambiqa_version": ((str, _NONE), "a version string"),
    "dspy_version": ((str, _NONE), "a version string"),
    "lm": ((str, _NONE), "an LM id string"),
    "retriever": ((dict, _NONE), "an object {kind, index, fingerprint}"),
    "metric": ((str, _NONE), "a metric name"),
    "reader": ((str, _NONE), "a reader name"),
    "train": ((str, list, _NONE), "a data spec string"),
    "dev": ((str, list, _NONE), "a data spec string"),
    "scores": ((dict, _NONE), "an object of scores"),
    "optimizer": ((dict,), "an object"),
    "optuna": ((dict, _NONE), "an object"),
    "demos_per_predictor": ((dict, int, _NONE), "an object or a count"),
    "compile_cost": ((dict, _NONE), "an object"),
    "created": ((str, _NONE), "a timestamp string"),
}


def now_iso() -> str:
    """The current UTC time as the manifest records it (seconds, ISO 8601)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def dspy_version() -> str | None:
    """The installed DSPy's version (None when DSPy cannot be imported)."""
    try:
        import dspy  # heavy (~2 s); only a writer needs its version
    except ImportError:  # pragma: no cover - DSPy is a dependency
        return None
    return str(dspy.__version__)


@dataclass
class Manifest:
    """One artifact's manifest (see the module docstring for each field)."""

    program: str
    program_config: dict[str, Any] | None
    lm: str | None
    retriever: dict[str, Any] | None
    metric: str | None
    optimizer: dict[str, Any]
    ambiqa_version: str | None = __version__
    dspy_version: str | None = field(default_factory=dspy_version)
    created: str | None = field(default_factory=now_iso)
    reader: str | None = None
    train: str | list[Any] | None = None
    dev: str | list[Any] | None = None
    scores: dict[str, Any] | None = None
    optuna: dict[str, Any] | None = None
    demos_per_predictor: dict[str, int] | int | None = None
    compile_cost: dict[str, Any] | None = None
    data_guard: Any = None
    #: keys this ambiqa does not know (a newer writer's), kept and written back as they were
    extra: dict[str, Any] = field(default_factory=dict)

    # ---- writing -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON object an artifact stores, in the historical key order."""
        self.validate()
        out = {key: getattr(self, key) for key in (
            "program", "program_config", "ambiqa_version", "dspy_version", "lm", "retriever",
            "metric", "reader", "train", "dev", "scores", "optimizer", "optuna",
            "demos_per_predictor", "compile_cost", "created", "data_guard")}
        out.update(self.extra)
        return out

    def update(self, values: dict[str, Any] | None) -> Manifest:
        """Set fields from ``values`` (a writer's additions); unknown keys go to ``extra``."""
        known = {f.name for f in fields(self)} - {"extra"}
        for key, value in (values or {}).items():
            if key in known:
                setattr(self, key, value)
            else:
                self.extra[key] = value
        return self

    # ---- reading -------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, path: Path | str = "<artifact>") -> Manifest:
        """Read and validate a manifest object; unknown keys warn and are kept in ``extra``."""
        if not isinstance(data, dict):
            raise ArtifactError(f"{path}: manifest must be an object")
        missing = [k for k in REQUIRED_KEYS if k not in data]
        if missing:
            raise ArtifactError(f"{path}: manifest is missing {', '.join(missing)}")
        known = {f.name for f in fields(cls)} - {"extra"}
        extra = {k: v for k, v in data.items() if k not in known}
        if extra:
            log.warning("%s: unknown manifest keys %s (ignored)", path, sorted(extra))
        values = {k: data.get(k) for k in known}
        manifest = cls(**values, extra=extra)
        manifest.validate(path)
        return manifest

    @classmethod
    def coerce(cls, manifest: Manifest | dict[str, Any],
               path: Path | str = "<manifest>") -> Manifest:
        """A :class:`Manifest` from either form (writers may still hand over a dict)."""
        return manifest if isinstance(manifest, Manifest) else cls.from_dict(manifest, path)

    # ---- checks --------------------------------------------------------------------------
    def validate(self, path: Path | str = "<artifact>") -> None:
        """Each field of the type the loader expects, and a ``program_config`` that holds only
        settings (no ``retriever``: the loader passes the retriever itself). One line naming
        the field, so a hand-edited artifact fails here, not deep inside a constructor."""
        for key, (types, what) in _TYPES.items():
            value = getattr(self, key)
            if not isinstance(value, types) or isinstance(value, bool):
                raise ArtifactError(f"{path}: manifest.{key} must be {what}, got "
                                    f"{type(value).__name__}",
                                    hint="re-create the artifact with `ambiqa compile`")
        config = self.program_config or {}
        reserved = sorted(RESERVED_CONFIG_KEYS & set(config))
        if reserved:
            raise ArtifactError(f"{path}: manifest.program_config sets {', '.join(reserved)}, "
                                "which is not a program setting",
                                hint="remove it; the index comes from manifest.retriever or "
                                     "ambiqa.load(path, retriever=...)")
        bad = sorted(k for k in config if not isinstance(k, str) or not k.isidentifier())
        if bad:
            raise ArtifactError(f"{path}: manifest.program_config has invalid setting name(s) "
                                f"{', '.join(map(repr, bad))}")
        info = self.retriever or {}
        for key in ("kind", "index", "fingerprint"):
            if info.get(key) is not None and not isinstance(info[key], str):
                raise ArtifactError(f"{path}: manifest.retriever.{key} must be a string, got "
                                    f"{type(info[key]).__name__}")
