"""The one loader of a program file: ``ambiqa.load``, ``evaluate``, ``ask``, ``serve`` and
``export`` load an ambiqa artifact or a program's own ``.save()`` JSON here, and nowhere else.

Two steps, so a command can refuse before it loads a model or opens a port:

1. :func:`read_program_file` reads the file once (the guarded reader of :mod:`ambiqa.jsonio`,
   under the artifact cap), validates it once and returns a :class:`ProgramFile`: the
   program's name and settings, its state, the index it records and the sha256 of the bytes
   it parsed. :meth:`ProgramFile.check_start` refuses a program that needs a retriever when
   the file records no index and none is given -- ``ask``, ``evaluate`` and ``ambiqa.load``
   before the LM loads, ``serve`` before it starts listening.
2. :func:`open_program` opens the recorded index (or takes the retriever or index given),
   judges its fingerprint by the one policy
   (:func:`ambiqa.optimizers.artifact.check_fingerprint`: a rebuilt recorded index is an
   error, a retriever passed on purpose a warning, ``strict_fingerprint`` overrides both) and
   builds the program. ``with_index=False`` (``export``) opens no index: exporting prompts
   needs the predictors only, so neither the fingerprint nor a missing index matters there.

:func:`load_program_file` does both.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.errors import ArtifactError, ConfigError, RetrievalIndexError
from ambiqa.jsonio import loads, read_capped
from ambiqa.optimizers.artifact import (
    FORMAT,
    MAX_ARTIFACT_ENV,
    artifact_program_class,
    build_artifact_program,
    check_fingerprint,
    load_program_state,
    max_artifact_bytes,
    validate_artifact,
)
from ambiqa.optimizers.splits import guard_warning
from ambiqa.programs.registry import build_program, program_class
from ambiqa.retrieval.factory import open_retriever

log = logging.getLogger(__name__)

#: the entry ``AmbiqaProgram.save`` adds to DSPy's state (kept in step with programs.base)
SAVED_KEY = "ambiqa"
#: kinds an index records that open by name (others -- memory, callable -- cannot be opened)
_OPENABLE = ("colbert", "bm25", "dense")
_REMAKE = "re-create it with `ambiqa compile` or prog.save(PATH.json)"


@dataclass
class Target:
    """A resolved target: the program to call and where it came from."""

    program: Any
    #: "program" (a registry name), "artifact", "saved" (a program's own .save()) or "module"
    kind: str
    #: the registry name of the program ("" for a foreign module)
    name: str
    manifest: dict[str, Any] | None = None
    path: Path | None = None
    #: sha256 of the file target (a resumed evaluation proves it continues the same program)
    sha256: str | None = None
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProgramFile:
    """A program file, read and validated: everything needed to build it, no index opened."""

    path: Path
    #: "artifact" (``format: ambiqa-artifact``) or "saved" (a program's own ``.save()``)
    kind: str
    #: the registry name of the program
    program: str
    #: the program's stored settings
    config: dict[str, Any]
    #: an artifact's manifest; for a saved program what its ``ambiqa`` entry records
    manifest: dict[str, Any]
    #: the validated artifact document, or the saved program's DSPy state
    doc: dict[str, Any]
    #: sha256 of the bytes read (the same read the document was parsed from)
    sha256: str

    @property
    def recorded(self) -> Any:
        """The index the file records (``{kind, index, fingerprint}``; None or a dict)."""
        return self.manifest.get("retriever")

    @property
    def needs_retriever(self) -> bool:
        return bool(getattr(program_class(self.program), "needs_retriever", True))

    def check_start(self, *, given: bool, config: dict[str, Any] | None = None) -> None:
        """Refuse, before anything loads, what :func:`open_program` would refuse later:
        settings for a file (they come from the file), and a program that needs a retriever
        when none is ``given`` and the file records no index to open."""
        if config:
            raise ConfigError(f"{self.path}: settings come from the file; program_config "
                              "applies to a program name only",
                              hint="drop --program-config / config=")
        info = self.recorded if isinstance(self.recorded, dict) else {}
        if given or info.get("index") or not self.needs_retriever:
            return
        raise ArtifactError(
            f"{self.path}: program {self.program!r} needs a retriever, and the file records no "
            f"index to open (retriever: {info.get('kind')}, index null)",
            hint="pass one: --index NAME, or ambiqa.load(path, retriever=...) / index=NAME")


def read_program_file(path: str | Path, *, program: str | None = None) -> ProgramFile:
    """Read ``path`` once and validate it (see the module docstring); ``program`` names the
    program of a plain DSPy save that lacks ambiqa's entry."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"artifact not found: {path}",
                            hint="compile one with ambiqa.compile(...) or `ambiqa compile`, or "
                                 "save a program with prog.save(PATH.json)")
    # the artifact cap for a saved program too: its demos are sent with every question just
    # as an artifact's are, and a 10,000-deep file is one line, not a RecursionError
    cap = max_artifact_bytes()
    raw = read_capped(path, error=ArtifactError, max_bytes=cap, what="program file",
                      hint=_REMAKE, size_hint=_size_hint(path))
    doc = loads(raw, source=str(path), error=ArtifactError, hint=_REMAKE)
    sha = hashlib.sha256(raw).hexdigest()
    if isinstance(doc, dict) and doc.get("format") == FORMAT:
        validate_artifact(doc, path)
        m = doc["manifest"]
        artifact_program_class(m, path)
        config = m.get("program_config") or {}
        return ProgramFile(path, "artifact", m["program"],
                           dict(config) if isinstance(config, dict) else config, m, doc, sha)
    if isinstance(doc, dict) and ("metadata" in doc or SAVED_KEY in doc):
        return _saved(path, doc, program, sha)
    found = f"format={doc.get('format')!r}" if isinstance(doc, dict) else type(doc).__name__
    raise ArtifactError(f"{path} is neither an ambiqa artifact nor a saved program ({found})",
                        hint="pass a file written by `ambiqa compile`, ambiqa.compile or "
                             "prog.save(PATH.json)")


def _size_hint(path: Path) -> str:
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    return f"save it with fewer demos, or raise the cap: {MAX_ARTIFACT_ENV}={int(size / 2**20) + 1}"


def _saved(path: Path, doc: dict[str, Any], program: str | None, sha: str) -> ProgramFile:
    info = doc.get(SAVED_KEY) if isinstance(doc.get(SAVED_KEY), dict) else {}
    name = program or info.get("program")
    if not name:
        raise ArtifactError(f"{path} is a DSPy saved state that does not say which program "
                            "it belongs to", hint="name it: ambiqa.load(PATH, program='diva')")
    config = info.get("program_config") or {}
    if not isinstance(config, dict):
        raise ArtifactError(f"{path}: ambiqa.program_config must be an object")
    program_class(str(name))  # an unknown name is refused now, naming the nearest one
    state = {k: v for k, v in doc.items() if k not in ("metadata", SAVED_KEY)}
    manifest = {"program": str(name), "program_config": config, "source": "prog.save",
                "retriever": info.get("retriever")}
    return ProgramFile(path, "saved", str(name), dict(config), manifest, state, sha)


def open_program(pf: ProgramFile, *, retriever: Any = None, index: str | dict | None = None,
                 index_root: str | Path | None = None, with_index: bool = True,
                 strict_fingerprint: bool | None = None, knn_encoder: Any = None,
                 program_kwargs: dict[str, Any] | None = None,
                 config: dict[str, Any] | None = None) -> Target:
    """Build the program ``pf`` describes (step 2 of the module docstring).

    ``retriever`` or ``index`` (a name) replace the recorded index; ``strict_fingerprint``:
    see :func:`~ambiqa.optimizers.artifact.check_fingerprint`; ``program_kwargs``: run-time
    objects the file cannot hold (EoR's ``sources``, an encoder).
    """
    if with_index:
        given = retriever is not None or index is not None
        pf.check_start(given=given, config=config)
        if retriever is None and index is not None:
            retriever = open_retriever(index, root=Path(index_root) if index_root else None)
        if retriever is None and pf.needs_retriever:
            retriever = _recorded_index(pf, index_root)
        if retriever is not None:
            check_fingerprint(pf.recorded, retriever, pf.path, strict=strict_fingerprint,
                              given=given)
    else:
        pf.check_start(given=True, config=config)  # the predictors only: no index opened
        retriever = None
    if pf.kind == "artifact":
        prog = build_artifact_program(pf.doc, pf.path, retriever=retriever,
                                      knn_encoder=knn_encoder, program_kwargs=program_kwargs,
                                      check_pool=with_index)
        _guard(pf, loud=not with_index)
    else:
        clash = set(program_kwargs or {}) & set(pf.config)
        if clash:
            raise ArtifactError(f"program_kwargs repeat stored settings: {sorted(clash)}")
        prog = build_program(pf.program, retriever=retriever, **pf.config,
                             **(program_kwargs or {}))
        load_program_state(prog, pf.doc, pf.path)
        prog.manifest = pf.manifest
    if with_index:
        check_runnable(prog)
    return Target(prog, pf.kind, pf.program, pf.manifest, pf.path, pf.sha256, dict(pf.config))


def check_runnable(program: Any) -> None:
    """Refuse a built program that needs a retriever and has none: it could only fail each
    question (``serve``'s app factory asks this of the program it is handed)."""
    if getattr(program, "needs_retriever", False) and getattr(program, "retriever",
                                                              None) is None:
        raise ConfigError(f"program {getattr(program, 'name', type(program).__name__)!r} "
                          "needs a retriever and has none",
                          hint="pass --index NAME, or build it with retriever=...")


def load_program_file(path: str | Path, *, program: str | None = None,
                      **opening: Any) -> Target:
    """Read, validate and build the program file ``path``: :func:`read_program_file` then
    :func:`open_program` (``opening``: its keywords)."""
    return open_program(read_program_file(path, program=program), **opening)


def _recorded_index(pf: ProgramFile, root: str | Path | None) -> Any:
    """The index the file records, opened by name (``check_start`` has refused a file that
    records none)."""
    info = pf.recorded if isinstance(pf.recorded, dict) else {}
    if not info.get("index"):
        return None
    kind = info.get("kind")
    spec = {"index": info["index"], "kind": kind if kind in _OPENABLE else None}
    try:
        return open_retriever(spec, root=Path(root) if root else None)
    except RetrievalIndexError as exc:
        raise ArtifactError(f"{pf.path} was compiled over index {info['index']!r} "
                            f"({kind}), which cannot be opened: {exc.message}",
                            hint=f"build it (ambiqa index CORPUS --name {info['index']} "
                                 f"--kind {kind}) or pass retriever=/--index") from exc


def _guard(pf: ProgramFile, loud: bool) -> None:
    """The data guard's warning: printed for an export (prompts bootstrapped on evaluation
    data must not pass unnoticed), logged for a program that runs."""
    text = guard_warning(pf.manifest)
    if not text:
        return
    if loud:
        print(f"warning: {pf.path}: {text}", file=sys.stderr)
    else:
        log.warning("%s: %s", pf.path, text)
