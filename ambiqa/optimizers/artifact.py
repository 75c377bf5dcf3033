"""Compiled-program artifacts: one JSON file, DSPy state plus a manifest. Never a pickle.

Layout::

    {
      "format": "ambiqa-artifact",
      "schema_version": 2,
      "manifest": {
        program, program_config,          what to build (registry name + constructor settings)
        ambiqa_version, dspy_version,     who wrote it
        lm,                               the LM id the demos were bootstrapped with
        retriever: {kind, index, fingerprint},
        metric, reader,                   what was optimized (and the D-F1 reader's name)
        train, dev,                       data specs (train is always a training split)
        scores: {train, dev, ...},        held-out-of-train ("train") and dev scores
        optimizer: {name, ...settings},   teleprompter and its settings (knn: k)
        optuna: {study, storage, trial, value} | null,
        demos_per_predictor, compile_cost, created
      },
      "state": <program.dump_state(): per-predictor demos, instructions, fields>
    }

Schema history: 1 lacked ``optuna`` and the ``scores.train`` convention; a version-1 file is
read with a warning and upgraded in memory (missing optional keys become null). A newer
version than this ambiqa knows is refused. Unknown *top-level* keys are refused (a different
format); unknown *manifest* keys only warn (a newer writer may record more).

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
from ambiqa.evaluation.runs.run_dir import json_depth_ok
from ambiqa.fsutil import atomic_write_json
from ambiqa.lm import configure
from ambiqa.optimizers.manifest import OPTIONAL_KEYS, REQUIRED_KEYS, Manifest
from ambiqa.optimizers.registry import get_teleprompter, teleprompter_names
from ambiqa.optimizers.splits import guard_warning
from ambiqa.programs.registry import build_program, program_class
from ambiqa.retrieval.adding import changes_since
from ambiqa.retrieval.factory import open_retriever

log = logging.getLogger(__name__)

FORMAT = "ambiqa-artifact"
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
# the manifest's keys and checks live with its type (ambiqa.optimizers.manifest)
REQUIRED_MANIFEST_KEYS = REQUIRED_KEYS
OPTIONAL_MANIFEST_KEYS = OPTIONAL_KEYS
#: what dspy 3.4's ``Predict.dump_state`` writes per predictor; ``lm`` is accepted only as null
PREDICTOR_STATE_KEYS = frozenset({"demos", "traces", "train", "signature", "fields", "lm"})
SIGNATURE_STATE_KEYS = frozenset({"instructions", "fields"})
TOP_LEVEL_KEYS = {"format", "schema_version", "manifest", "state"}
#: the largest artifact read (MiB): a compiled program is prompts and a few demos (the ones
#: here are well under 1 MiB); tens of megabytes of demos would all be sent with every
#: question. ``$AMBIQA_MAX_ARTIFACT_MB`` raises (or lowers) it.
MAX_ARTIFACT_MB = 16.0
MAX_ARTIFACT_ENV = "AMBIQA_MAX_ARTIFACT_MB"
#: deepest JSON nesting an artifact may have (real ones are under 10 levels deep)
MAX_ARTIFACT_DEPTH = 64


def max_artifact_bytes() -> int:
    """The size cap in bytes: :data:`MAX_ARTIFACT_MB` or ``$AMBIQA_MAX_ARTIFACT_MB``."""
    raw = os.environ.get(MAX_ARTIFACT_ENV, "").strip()
    if not raw:
        return int(MAX_ARTIFACT_MB * 1024 * 1024)
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not mb > 0:
        raise ConfigError(f"${MAX_ARTIFACT_ENV} must be a positive number of MiB, got {raw!r}")
    return int(mb * 1024 * 1024)


def write_json(path: Path, obj: Any) -> None:
    """Atomically write ``obj``; an OS failure (disk full, no permission) becomes a clear
    :class:`ArtifactError`, and the previous file, if any, is left as it was."""
    try:
        atomic_write_json(path, obj)
    except OSError as exc:
        raise ArtifactError(f"cannot write {path}: {exc.strerror or exc}",
                            hint="check the directory exists, is writable and has space") from exc


def save_artifact(path: str | os.PathLike[str], program: Any,
                  manifest: Manifest | dict[str, Any]) -> Path:
    """Serialize ``program``'s DSPy state with ``manifest`` (a :class:`Manifest`, or a dict
    read through it) into one JSON artifact."""
    manifest = Manifest.coerce(manifest).to_dict()  # validated: a bad field never reaches disk
    state = program.dump_state()
    for name, entry in state.items():
        if isinstance(entry, dict) and entry.get("lm") is not None:
            log.warning("predictor %s has its own LM set; artifacts carry prompts, not "
                        "endpoints, so it is not saved", name)
            entry["lm"] = None
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
    cap = max_artifact_bytes()
    size = path.stat().st_size
    if size > cap:
        raise ArtifactError(
            f"{path} is {size / 2**20:.1f} MiB, over the {cap / 2**20:g} MiB artifact cap "
            "(every demo in it is sent with each question)",
            hint=f"recompile with fewer demos, or raise the cap: {MAX_ARTIFACT_ENV}="
                 f"{int(size / 2**20) + 1}")
    try:
        text = path.read_text(encoding="utf-8")
        if not json_depth_ok(text, MAX_ARTIFACT_DEPTH):
            raise ArtifactError(f"{path} nests deeper than {MAX_ARTIFACT_DEPTH} levels; "
                                "an artifact is a few levels deep",
                                hint="re-create it with `ambiqa compile`")
        doc = json.loads(text)
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{path} is not UTF-8 text (is it a binary file?)") from exc
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                            f"{exc.msg})", hint="re-create it with `ambiqa compile`") from exc
    except RecursionError as exc:
        raise ArtifactError(f"{path} nests too deep to read",
                            hint="re-create it with `ambiqa compile`") from exc
    validate_artifact(doc, path)
    return doc


def validate_artifact(doc: Any, path: Path | str = "<artifact>") -> None:
    if not isinstance(doc, dict):
        raise ArtifactError(f"{path}: an artifact is a JSON object, found {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise ArtifactError(f"{path}: not an ambiqa artifact (format={doc.get('format')!r})")
    version = doc.get("schema_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise ArtifactError(
            f"{path}: schema version {version!r} is not supported (this ambiqa reads "
            f"{', '.join(map(str, READABLE_VERSIONS))})",
            hint="re-compile the program with this version of ambiqa")
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
    # field types, program_config and retriever checked by the one manifest type; absent
    # optional keys read as null, unknown keys warn and are kept
    doc["manifest"] = Manifest.from_dict(manifest, path).to_dict()
    if version != SCHEMA_VERSION:
        log.warning("%s: schema version %s is older than %s; reading it with the missing "
                    "optional fields set to null", path, version, SCHEMA_VERSION)
        doc["schema_version"] = SCHEMA_VERSION


def _check_signature_state(name: str, sig: dict[str, Any], path: Path | str) -> None:
    """Instructions a string; fields a list of ``{prefix, description}`` strings (DSPy calls
    string methods on both when it formats a prompt)."""
    instructions = sig.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ArtifactError(f"{path}: predictor {name} signature.instructions must be a "
                            f"string, got {type(instructions).__name__}",
                            hint="fix the instructions text or re-create the artifact")
    fields = sig.get("fields")
    if fields is None:
        return
    if not isinstance(fields, list):
        raise ArtifactError(f"{path}: predictor {name} signature.fields must be a list")
    for i, field in enumerate(fields):
        if not isinstance(field, dict):
            raise ArtifactError(f"{path}: predictor {name} signature.fields[{i}] must be an "
                                "object")
        for key in ("prefix", "description"):
            if field.get(key) is not None and not isinstance(field[key], str):
                raise ArtifactError(f"{path}: predictor {name} signature.fields[{i}].{key} "
                                    f"must be a string, got {type(field[key]).__name__}")


def check_state(program: Any, state: dict[str, Any], path: Path | str = "<artifact>",
                ) -> dict[str, Any]:
    """Validate ``state`` against ``program``'s predictors; return it ready for DSPy.

    Exactly the program's parameter names; per predictor only :data:`PREDICTOR_STATE_KEYS`
    (``lm`` only as null), a signature with only instructions and fields, demos as a list of
    objects. Each refusal names the predictor and the key.
    """
    expected = list(program.dump_state())
    missing = [n for n in expected if n not in state]
    extra = [n for n in state if n not in expected]
    if missing or extra:
        parts = ([f"missing predictor(s) {', '.join(missing)}"] if missing else []) + (
            [f"unknown predictor(s) {', '.join(extra)}"] if extra else [])
        raise ArtifactError(f"{path}: state does not fit program {type(program).__name__}: "
                            + "; ".join(parts), hint=f"its predictors are: {', '.join(expected)}")
    clean: dict[str, Any] = {}
    for name in expected:
        entry = state[name]
        if not isinstance(entry, dict):
            raise ArtifactError(f"{path}: state of predictor {name} must be an object")
        unknown = sorted(set(entry) - PREDICTOR_STATE_KEYS)
        if unknown:
            raise ArtifactError(f"{path}: predictor {name} has unknown state key(s) "
                                f"{', '.join(unknown)}",
                                hint="an artifact holds demos, traces, train and the signature")
        if entry.get("lm") is not None:
            raise ArtifactError(f"{path}: predictor {name} carries an lm entry "
                                f"({json.dumps(entry['lm'], default=str)[:80]}); artifacts "
                                "carry prompts, not endpoints",
                                hint="choose the LM when loading: ambiqa.load(path, lm=...)")
        sig = entry.get("signature")
        if not isinstance(sig, dict):
            raise ArtifactError(f"{path}: predictor {name} has no signature object")
        bad_sig = sorted(set(sig) - SIGNATURE_STATE_KEYS)
        if bad_sig:
            raise ArtifactError(f"{path}: predictor {name} signature has unknown key(s) "
                                f"{', '.join(bad_sig)}")
        _check_signature_state(name, sig, path)
        for key in ("demos", "traces", "train"):
            value = entry.get(key, [])
            if not isinstance(value, list) or (key == "demos" and not all(
                    isinstance(d, dict) for d in value)):
                raise ArtifactError(f"{path}: predictor {name} {key} must be a list"
                                    + (" of objects" if key == "demos" else ""))
        clean[name] = {**entry, "lm": None}
    return clean


def load_program_state(program: Any, state: dict[str, Any], path: Path | str = "<artifact>",
                       ) -> None:
    """Load DSPy state into ``program``, keeping each predictor's signature name and cap.

    The state is validated first (:func:`check_state`). DSPy rebuilds a signature from saved
    state as an anonymous ``StringSignature``; ambiqa's cost traces and exports name
    predictors by their signature class, and the LM applies the class's
    ``output_cap_tokens``, so both are restored.
    """
    state = check_state(program, state, path)
    names = {n: p.signature.__name__ for n, p in program.named_predictors()}
    # the output cap is a class attribute of the signature (ambiqa.signatures.common)
    caps = {n: getattr(p.signature, "output_cap_tokens", None)
            for n, p in program.named_predictors()}
    try:
        program.load_state(state)
    except Exception as exc:  # DSPy raises various errors on a state that does not fit
        raise ArtifactError(f"{path}: state does not fit program "
                            f"{type(program).__name__}: {exc}") from exc
    for name, predictor in program.named_predictors():
        if name in names:
            predictor.signature.__name__ = names[name]
            if caps.get(name) is not None:
                predictor.signature.output_cap_tokens = caps[name]


def install_optimizer_hooks(program: Any, manifest: dict[str, Any], *,
                            knn_encoder: Any = None) -> None:
    """Re-install run-time behaviour an optimizer left on the program (knn demo selection):
    each registered teleprompter knows its own (:meth:`Teleprompter.install`)."""
    opt = manifest.get("optimizer") or {}
    name = opt.get("name")
    if isinstance(name, str) and name in teleprompter_names():
        get_teleprompter(name).install(program, opt, encoder=knn_encoder)


def check_eor_pool(manifest: dict[str, Any], program: Any, retriever: Any,
                   program_kwargs: dict[str, Any], path: Path | str = "<artifact>") -> None:
    """EoR voter weights belong to the pool they were tuned on: refuse to apply them to a
    program whose pool, rerank depth or sources differ from the ones the artifact records.

    The weights say how much to trust each member's answer; behind ``BM25@5`` a different
    index (or a missing source) is a different member, so the weights would mean nothing.
    """
    opt = manifest.get("optimizer") or {}
    if opt.get("name") != "eor-weights":
        return
    pool = opt.get("pool")
    if pool is not None and list(getattr(program, "pool", ())) != list(pool):
        raise ArtifactError(f"{path}: these EoR weights were tuned on pool {pool}, not "
                            f"{list(getattr(program, 'pool', ()))}",
                            hint="tune weights for this pool with `ambiqa tune-eor`")
    depth = opt.get("rerank_depth")
    if depth is not None and getattr(program, "rerank_depth", depth) != depth:
        raise ArtifactError(f"{path}: these EoR weights were tuned with rerank depth {depth}, "
                            f"the program has {program.rerank_depth}")
    recorded = opt.get("sources")
    if not isinstance(recorded, dict):
        return
    given = dict(program_kwargs.get("sources") or {})
    if retriever is not None:
        given.setdefault("Wiki", retriever)
    wanted = {name for name in recorded if recorded[name] is not None}
    missing = sorted(wanted - set(given))
    if missing:
        raise ArtifactError(f"{path}: these EoR weights were tuned with source(s) "
                            f"{', '.join(missing)}, which were not given",
                            hint="pass them: ambiqa.load(path, retriever=..., "
                                 "program_kwargs={'sources': {...}})")
    for name in sorted(wanted):
        want = (recorded[name] or {}).get("fingerprint") if isinstance(
            recorded[name], dict) else None
        have = getattr(given[name], "fingerprint", None)
        if want and have and want != have:
            raise ArtifactError(f"{path}: source {name} is index {have}, but the EoR weights "
                                f"were tuned on {want}: a different pool member",
                                hint="tune weights for this pool with `ambiqa tune-eor`")


def check_fingerprint(recorded: Any, retriever: Any, path: Path | str, *,
                      strict: bool | None = None, given: bool = False) -> None:
    """The one fingerprint policy of every loader (``ambiqa.load``, ``evaluate``, ``ask``,
    ``serve``, ``export --verify`` through :mod:`ambiqa.api.loader`, and :func:`load_artifact`).

    ``recorded``: the ``{kind, index, fingerprint}`` the file records. A program's demos were
    bootstrapped over that index; with another one the demos still work, but the scores in
    the manifest no longer describe the set-up. ``strict=None`` (the default): the recorded
    index opened by name with a different fingerprint (rebuilt from another corpus) is an
    :class:`ArtifactError`, a retriever passed on purpose (``given``: ``retriever=``,
    ``--index``) only a warning -- the caller chose it. ``strict=True`` makes both an error,
    ``strict=False`` (the opt-out) both a warning.
    """
    want = recorded.get("fingerprint") if isinstance(recorded, dict) else None
    have = getattr(retriever, "fingerprint", None)
    if not want or not have or want == have:
        return
    msg = f"{path}: compiled against index {want}, but the retriever at hand is {have}"
    added = changes_since(retriever, want)
    if added:  # the same index, grown: say how
        msg += f" ({added})"
    if strict or (strict is None and not given):
        raise ArtifactError(msg, hint="rebuild the index from the same corpus, recompile, "
                                      "or accept this index: strict_fingerprint=False, or "
                                      "name it on purpose (--index NAME / index=NAME)")
    log.warning(msg)


def artifact_program_class(manifest: dict[str, Any], path: Path | str) -> Any:
    """The registered class of the program an artifact names (an unknown name is an
    :class:`ArtifactError` naming the file)."""
    try:
        return program_class(manifest["program"])
    except ConfigError as exc:
        raise ArtifactError(f"{path}: {exc.message}", hint=exc.hint) from exc


def build_artifact_program(doc: dict[str, Any], path: Path | str, *, retriever: Any,
                           knn_encoder: Any = None, program_kwargs: dict[str, Any] | None = None,
                           check_pool: bool = True) -> Any:
    """Build the program a validated artifact ``doc`` describes over ``retriever`` (None:
    none): the stored config, the state, the optimizer's run-time hooks, ``.manifest``.

    Used by every loader, so an artifact becomes the same program whichever loads it.
    ``check_pool=False`` skips the EoR pool check (exporting prompts opens no sources).
    """
    manifest = doc["manifest"]
    config = manifest.get("program_config") or {}
    if not isinstance(config, dict):
        raise ArtifactError(f"{path}: program_config must be an object")
    artifact_program_class(manifest, path)
    clash = set(program_kwargs or {}) & set(config)
    if clash:
        raise ArtifactError(f"program_kwargs repeat stored settings: {sorted(clash)}",
                            hint="tuned settings live in the artifact; pass only run-time "
                                 "objects such as sources or an encoder")
    program = build_program(manifest["program"], retriever=retriever, **config,
                            **(program_kwargs or {}))
    if check_pool:
        check_eor_pool(manifest, program, retriever, program_kwargs or {}, path)
    load_program_state(program, doc["state"], path)
    install_optimizer_hooks(program, manifest, knn_encoder=knn_encoder)
    program.manifest = manifest
    return program


def load_artifact(path: str | os.PathLike[str], *, retriever: Any = None, lm: Any = None,
                  strict_fingerprint: bool | None = None, knn_encoder: Any = None,
                  program_kwargs: dict[str, Any] | None = None) -> Any:
    """Build the compiled program described by an artifact, ready to call.

    The artifact half of ``ambiqa.load``, for code that holds an artifact and a retriever;
    the commands and ``ambiqa.load`` load through :mod:`ambiqa.api.loader`, which also reads
    a program's own ``.save()`` JSON and refuses, at start, a program that needs a retriever
    and has none. Both build with :func:`build_artifact_program` and judge the index with
    :func:`check_fingerprint`.

    ``retriever``: pass one to override the index named in the manifest; otherwise the index
    is opened by name. A fingerprint that differs from the one the program was compiled
    against: see :func:`check_fingerprint` (``strict_fingerprint`` is its ``strict``).
    ``lm``: if given, it is configured as DSPy's LM (with ambiqa tracing).
    ``knn_encoder``: the sentence encoder for an artifact compiled with ``knn`` (default: the
    local MiniLM, loaded on the first call).
    ``program_kwargs``: run-time objects the manifest cannot hold (EoR's extra ``sources``,
    an ``encoder``); they must not repeat a key of the stored program config.
    """
    doc = read_artifact(path)
    manifest = doc["manifest"]
    cls = artifact_program_class(manifest, path)
    info = manifest.get("retriever") or {}
    given = retriever is not None
    if retriever is None and getattr(cls, "needs_retriever", True) and info.get("index"):
        retriever = open_retriever(info)
    if retriever is not None:
        check_fingerprint(info, retriever, path, strict=strict_fingerprint, given=given)
    program = build_artifact_program(doc, path, retriever=retriever, knn_encoder=knn_encoder,
                                     program_kwargs=program_kwargs)
    loud = guard_warning(manifest)
    if loud:
        log.warning("%s: %s", path, loud)
    if lm is not None:
        configure(lm)
    return program
