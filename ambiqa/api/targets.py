"""A target -- program name, artifact, a program's own ``.save()`` JSON, or a module -- resolved
in one place.

Every verb that runs or exports something (``evaluate``, ``export``, ``ask``, ``ambiqa.load``)
takes a *target*. What it is decides how it is built:

==========================  ================================================================
``"diva"``                  a registered program name: built zero-shot with ``config``
``"artifacts/diva.json"``   an ambiqa artifact (``format: ambiqa-artifact``): program, config,
                            demos and the index it was compiled over
``"my_diva.json"``          what ``prog.save("my_diva.json")`` wrote: DSPy's state plus an
                            ``ambiqa`` entry naming the program (``program=`` names it when a
                            plain DSPy save lacks the entry)
a ``dspy.Module``           used as it is
==========================  ================================================================

A file target's index is opened by the name, kind and fingerprint it records; a different
fingerprint there is an error (``strict_fingerprint=False`` makes it a warning). A retriever
passed on purpose replaces the recorded one, and a different fingerprint then only warns.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.errors import ArtifactError, ConfigError
from ambiqa.jsonio import read_json

log = logging.getLogger(__name__)

#: the entry ``AmbiqaProgram.save`` adds to DSPy's state (kept in step with programs.base)
SAVED_KEY = "ambiqa"


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


def is_file_target(target: object) -> bool:
    """Whether ``target`` names a file (an artifact or a saved program), not a program name."""
    if not isinstance(target, str | Path):
        return False
    text = str(target)
    return text.endswith(".json") or Path(text).is_file()


def check_target(target: object) -> None:
    """Fail fast, before any model loads: an unknown program name names the nearest one."""
    from ambiqa.programs.registry import program_class

    if isinstance(target, str) and not is_file_target(target):
        program_class(target)


def file_sha256(path: str | Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc


def resolve(target: Any, *, retriever: Any = None, index: str | dict | None = None,
            index_root: str | Path | None = None, config: dict[str, Any] | None = None,
            program: str | None = None, with_index: bool = True,
            strict_fingerprint: bool = True, knn_encoder: Any = None,
            program_kwargs: dict[str, Any] | None = None) -> Target:
    """Build the program ``target`` names (see the module docstring).

    ``retriever`` (any retriever, callable or ``dspy.Retrieve``) or ``index`` (a name) supply
    the passages; a file target otherwise opens the index it records. ``with_index=False``
    builds without any index (exporting prompts needs the predictors only). ``config``
    applies to a program name only: a file's settings are the ones it was compiled with.
    """
    import dspy

    if isinstance(target, dspy.Module):
        return Target(target, "module", getattr(target, "name", ""), config={})
    if not isinstance(target, str | Path):
        raise ConfigError(f"a target is a program name, a JSON file or a dspy.Module, got "
                          f"{type(target).__name__}")
    if retriever is None and index is not None:
        retriever = _open_retriever(index, root=index_root) if with_index else None
    if is_file_target(target):
        return _resolve_file(Path(target), retriever=retriever, program=program,
                             with_index=with_index, strict=strict_fingerprint,
                             knn_encoder=knn_encoder, program_kwargs=program_kwargs,
                             index_root=index_root, config=config)
    from ambiqa.programs.registry import build_program, program_class

    name = str(target).strip().lower().replace("-", "_")
    cls = program_class(name)
    if retriever is None and with_index and getattr(cls, "needs_retriever", True):
        raise ConfigError(f"program {name!r} needs a retriever",
                          hint="pass retriever=... or index=NAME (build one with "
                               "ambiqa.index(...) or `ambiqa index CORPUS --name NAME`)")
    prog = build_program(name, retriever=retriever, **(config or {}), **(program_kwargs or {}))
    return Target(prog, "program", name, config=dict(config or {}))


def _open_retriever(index: str | dict[str, Any], root: str | Path | None = None) -> Any:
    """The retriever of the index ``index`` (what a program searches through)."""
    from ambiqa.retrieval.factory import open_retriever

    return open_retriever(index, root=Path(root) if root else None)


def _read_json(path: Path) -> Any:
    """A program file (an ambiqa artifact or a ``prog.save`` file) through the guarded reader,
    under the artifact cap: a saved program's demos are sent with every question just as an
    artifact's are, so a 20 MB ``.save()`` file is refused like a 20 MB artifact (it loaded
    before), and a 10,000-deep one is a one-line error, not a RecursionError."""
    from ambiqa.optimizers.artifact import MAX_ARTIFACT_ENV, max_artifact_bytes

    if not path.is_file():
        raise ArtifactError(f"artifact not found: {path}",
                            hint="compile one with ambiqa.compile(...) or `ambiqa compile`, or "
                                 "save a program with prog.save(PATH.json)")
    cap = max_artifact_bytes()
    size = path.stat().st_size
    return read_json(path, error=ArtifactError, max_bytes=cap, what="program file",
                     hint="re-create it with `ambiqa compile` or prog.save(PATH.json)",
                     size_hint=f"save it with fewer demos, or raise the cap: "
                               f"{MAX_ARTIFACT_ENV}={int(size / 2**20) + 1}")


def _resolve_file(path: Path, *, retriever: Any, program: str | None, with_index: bool,
                  strict: bool, knn_encoder: Any, program_kwargs: dict[str, Any] | None,
                  index_root: str | Path | None, config: dict[str, Any] | None) -> Target:
    from ambiqa.optimizers.artifact import FORMAT

    doc = _read_json(path)
    if config:
        raise ConfigError(f"{path}: settings come from the file; program_config applies to a "
                          "program name only", hint="drop --program-config / config=")
    sha = file_sha256(path)
    if isinstance(doc, dict) and doc.get("format") == FORMAT:
        return _artifact(path, doc, retriever=retriever, with_index=with_index, strict=strict,
                         knn_encoder=knn_encoder, program_kwargs=program_kwargs, sha=sha,
                         index_root=index_root)
    if isinstance(doc, dict) and ("metadata" in doc or SAVED_KEY in doc):
        return _saved(path, doc, retriever=retriever, program=program, with_index=with_index,
                      strict=strict, program_kwargs=program_kwargs, sha=sha,
                      index_root=index_root)
    found = f"format={doc.get('format')!r}" if isinstance(doc, dict) else type(doc).__name__
    raise ArtifactError(f"{path} is neither an ambiqa artifact nor a saved program ({found})",
                        hint="pass a file written by `ambiqa compile`, ambiqa.compile or "
                             "prog.save(PATH.json)")


def _artifact(path: Path, doc: dict[str, Any], *, retriever: Any, with_index: bool,
              strict: bool, knn_encoder: Any, program_kwargs: dict[str, Any] | None,
              sha: str, index_root: str | Path | None) -> Target:
    from ambiqa.optimizers.artifact import (
        install_optimizer_hooks,
        load_artifact,
        load_program_state,
        read_artifact,
    )
    from ambiqa.programs.registry import build_program

    if with_index:
        given = retriever is not None  # a retriever passed on purpose: a mismatch only warns
        if retriever is None:
            manifest = read_artifact(path)["manifest"]
            retriever = _recorded_index(manifest.get("retriever"), path, index_root)
            _require_index(manifest, retriever, path)
        prog = load_artifact(path, retriever=retriever, strict_fingerprint=strict and not given,
                             knn_encoder=knn_encoder, program_kwargs=program_kwargs)
        m = prog.manifest
        return Target(prog, "artifact", m["program"], m, path, sha,
                      dict(m.get("program_config") or {}))
    doc = read_artifact(path)
    m = doc["manifest"]
    prog = build_program(m["program"], retriever=None, **(m.get("program_config") or {}),
                         **(program_kwargs or {}))
    load_program_state(prog, doc["state"], path)
    install_optimizer_hooks(prog, m, knn_encoder=knn_encoder)
    prog.manifest = m
    _guard(path, m)
    return Target(prog, "artifact", m["program"], m, path, sha,
                  dict(m.get("program_config") or {}))


def _recorded_index(info: Any, path: Path, root: str | Path | None) -> Any:
    """The index a file records, opened; None when it records none (old artifacts:
    ``index: null``) -- the program then asks for a retriever when it needs one."""
    if not isinstance(info, dict) or not info.get("index"):
        return None
    from ambiqa.errors import RetrievalIndexError

    kind = info.get("kind")
    spec = {"index": info["index"], "kind": kind if kind in ("colbert", "bm25", "dense")
            else None}
    try:
        return _open_retriever(spec, root)
    except RetrievalIndexError as exc:
        raise ArtifactError(f"{path} was compiled over index {info['index']!r} "
                            f"({kind}), which cannot be opened: {exc.message}",
                            hint=f"build it (ambiqa index CORPUS --name {info['index']} "
                                 f"--kind {kind}) or pass retriever=/--index") from exc


def _require_index(manifest: dict[str, Any], retriever: Any, path: Path) -> None:
    """A program that needs passages, from a file that names no index (artifacts written
    before indexes were recorded: ``retriever.index: null``): say so at load, not at the first
    question."""
    from ambiqa.programs.registry import program_class

    if retriever is not None:
        return
    try:
        needs = getattr(program_class(str(manifest.get("program"))), "needs_retriever", True)
    except ConfigError:
        return  # load_artifact names the unknown program
    if needs:
        info = manifest.get("retriever") or {}
        raise ArtifactError(f"{path} records no index to open (retriever: {info.get('kind')}, "
                            "index null: written before artifacts recorded their index)",
                            hint="pass one: --index NAME, or ambiqa.load(path, retriever=...)")


def check_fingerprint(recorded: Any, retriever: Any, path: Path | str, strict: bool) -> None:
    want = recorded.get("fingerprint") if isinstance(recorded, dict) else None
    have = getattr(retriever, "fingerprint", None)
    if want and have and want != have:
        msg = f"{path}: compiled against index {want}, but the retriever at hand is {have}"
        if strict:
            raise ArtifactError(msg, hint="rebuild the index from the same corpus, recompile, "
                                          "or pass strict_fingerprint=False")
        log.warning(msg)


def _saved(path: Path, doc: dict[str, Any], *, retriever: Any, program: str | None,
           with_index: bool, strict: bool, program_kwargs: dict[str, Any] | None, sha: str,
           index_root: str | Path | None) -> Target:
    from ambiqa.optimizers.artifact import load_program_state
    from ambiqa.programs.registry import build_program, program_class

    info = doc.get(SAVED_KEY) if isinstance(doc.get(SAVED_KEY), dict) else {}
    name = program or info.get("program")
    if not name:
        raise ArtifactError(f"{path} is a DSPy saved state that does not say which program "
                            "it belongs to", hint="name it: ambiqa.load(PATH, program='diva')")
    config = info.get("program_config") or {}
    if not isinstance(config, dict):
        raise ArtifactError(f"{path}: ambiqa.program_config must be an object")
    cls = program_class(str(name))
    given = retriever is not None  # a retriever passed on purpose: a mismatch only warns
    if retriever is None and with_index and getattr(cls, "needs_retriever", True):
        retriever = _recorded_index(info.get("retriever"), path, index_root)
    if retriever is not None:
        check_fingerprint(info.get("retriever"), retriever, path, strict and not given)
    clash = set(program_kwargs or {}) & set(config)
    if clash:
        raise ArtifactError(f"program_kwargs repeat stored settings: {sorted(clash)}")
    prog = build_program(str(name), retriever=retriever, **config, **(program_kwargs or {}))
    state = {k: v for k, v in doc.items() if k not in ("metadata", SAVED_KEY)}
    load_program_state(prog, state, path)
    manifest = {"program": str(name), "program_config": config, "source": "prog.save",
                "retriever": info.get("retriever")}
    prog.manifest = manifest
    return Target(prog, "saved", str(name), manifest, path, sha, dict(config))


def _guard(path: Path, manifest: dict[str, Any]) -> None:
    from ambiqa.optimizers.splits import guard_warning

    loud = guard_warning(manifest)
    if loud:  # loud on purpose: an export of such prompts must not pass unnoticed
        import sys

        print(f"warning: {path}: {loud}", file=sys.stderr)


def load(path: str | Path, *, retriever: Any = None, lm: Any = None, program: str | None = None,
         index: str | None = None, strict_fingerprint: bool = True, knn_encoder: Any = None,
         program_kwargs: dict[str, Any] | None = None) -> Any:
    """Load an artifact or a program's own ``.save()`` JSON; return the callable program.

    ``retriever``/``index`` replace the index the file records (otherwise it is opened by
    name; a missing index or a different fingerprint is an :class:`ArtifactError`).
    ``lm``: configured as DSPy's LM with ambiqa tracing, beside the user's callbacks.
    """
    if not is_file_target(path):
        raise ConfigError(f"ambiqa.load takes a JSON file, got {path!r}",
                          hint="build a program by name with ambiqa.Diva(...) or "
                               "ambiqa.build('diva', retriever=...)")
    found = resolve(path, retriever=retriever, index=index, program=program,
                    strict_fingerprint=strict_fingerprint, knn_encoder=knn_encoder,
                    program_kwargs=program_kwargs)
    if lm is not None:
        from ambiqa.lm import configure

        configure(lm)
    return found.program
