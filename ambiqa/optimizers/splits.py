"""Training splits only: the guard every optimizer entry point runs before it spends a call.

Compiling, tuning or weighting a program on the questions it is later scored on makes every
dev number a training number. The CLI used to check the split *name*; a caller of the Python
API could hand ``compile_program`` the examples of ``asqa:dev`` and nothing noticed. So:

* :func:`ambiqa.data.load_dataset` tags every example with the spec it came from (a private
  attribute, ``SOURCE_ATTR``, which DSPy keeps out of the example's fields, demos and
  prompts);
* :func:`check_training_data` refuses examples tagged with a dev/test/oracle split, a named
  spec that is not a training split, and question ids shared between the training data and
  the dev data given beside it;
* ``allow_eval_splits=True`` (CLI ``--allow-eval-splits``) lets research runs through, and the
  returned record goes into the artifact manifest as ``data_guard`` so that loading or
  exporting the artifact warns loudly.

Examples built in code (no tag) and specs of unknown role cannot be checked by name; the id
overlap check still applies when dev data is given.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ambiqa.data import is_training_split
from ambiqa.data.specs import SOURCE_ATTR
from ambiqa.errors import ConfigError

log = logging.getLogger(__name__)

FLAG_HINT = ("for research only, pass allow_eval_splits=True (CLI: --allow-eval-splits); "
             "the artifact then records that it saw evaluation data")
WARNING = "OPTIMIZED ON EVALUATION DATA: its dev/test scores are not held-out numbers"


def sources_of(examples: Iterable[Any]) -> list[str]:
    """The distinct specs the examples were loaded from (untagged examples add nothing)."""
    seen: list[str] = []
    for ex in examples:
        src = getattr(ex, SOURCE_ATTR, None)
        if isinstance(src, str) and src not in seen:
            seen.append(src)
    return seen


def _is_eval_spec(spec: str) -> bool:
    try:
        return not is_training_split(spec)
    except ConfigError:  # not a spec we can parse: a label such as "collect"
        return False


def _ids(examples: Iterable[Any]) -> list[str]:
    out = []
    for ex in examples:
        value = ex.get("id") if isinstance(ex, dict) else getattr(ex, "id", None)
        if value not in (None, ""):
            out.append(str(value))
    return out


def check_training_data(trainset: Iterable[Any] | None = None, *, spec: str | None = None,
                        devset: Iterable[Any] | None = None, dev_spec: str | None = None,
                        train_ids: Iterable[str] | None = None,
                        dev_ids: Iterable[str] | None = None,
                        allow_eval_splits: bool = False, what: str = "compiling") -> dict[str, Any]:
    """Refuse evaluation data as training data; return the ``data_guard`` manifest record.

    Violations: a ``spec`` (or an example's source tag) that names a dev/test/oracle split,
    and ids present in both the training and the dev data (``devset`` examples, or the ids
    given directly). With ``allow_eval_splits`` the violations are logged as a warning and
    recorded instead of raised.
    """
    train = list(trainset or [])
    specs = ([spec] if spec else []) + [s for s in sources_of(train) if s != spec]
    violations = [f"{s!r} is not a training split" for s in specs if _is_eval_spec(s)]
    dev = list(devset or [])
    dev_id_set = set(dev_ids or []) | set(_ids(dev))
    if dev_id_set:
        shared = sorted((set(train_ids or []) | set(_ids(train))) & dev_id_set)
        if shared:
            where = f" and {dev_spec!r}" if dev_spec else " and the dev data"
            violations.append(f"{len(shared)} question id(s) are in both the training data"
                              f"{where} (e.g. {', '.join(shared[:3])})")
    record: dict[str, Any] = {"allow_eval_splits": bool(allow_eval_splits),
                              "train_sources": specs, "violations": violations}
    if violations:
        if not allow_eval_splits:
            raise ConfigError(f"refusing to use evaluation data for {what}: "
                              + "; ".join(violations), hint=FLAG_HINT)
        record["warning"] = WARNING
        log.warning("%s: %s (allow_eval_splits=True)", WARNING, "; ".join(violations))
    return record


def guard_warning(manifest: dict[str, Any] | None) -> str | None:
    """The loud line for an artifact whose manifest says it saw evaluation data, else None."""
    guard = (manifest or {}).get("data_guard") or {}
    if isinstance(guard, dict) and guard.get("violations"):
        return f"{WARNING} ({'; '.join(map(str, guard['violations']))})"
    return None
