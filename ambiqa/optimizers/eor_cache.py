"""EoR's answer cache and vectorized voter: what the weight search scores (no Optuna here).

Split from :mod:`ambiqa.optimizers.eor_weights` (steps 1 and 3 of its outline, which
re-exports every name here): :class:`Cache` holds per question the gold answers, the member
answers and their similarity matrices, read from an EoR run (:func:`load_cache`) or made by a
dedicated pass (:func:`collect_cache`); :func:`vote_batch` and :func:`accuracy` score one set
of weights over all cached questions at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ambiqa.data import load_dataset
from ambiqa.errors import ConfigError, DataError
from ambiqa.evaluation.metrics import exact_match, normalize_answer, token_f1
from ambiqa.evaluation.registry import gold_answers_of
from ambiqa.evaluation.runs.runner import ResultsFile, example_id
from ambiqa.optimizers.splits import sources_of
from ambiqa.programs.eor import DEFAULT_THRESHOLD, METRICS, POOLINGS, EoRConfig
from ambiqa.retrieval.factory import describe

CACHE_FORMAT = "ambiqa-eor-cache"
GOLD_METRICS = ("em", "f1", "contains")


def _correct(answer: str, gold: list[str], how: str) -> float:
    if not answer:
        return 0.0
    if how == "em":
        return exact_match(answer, gold)
    if how == "f1":
        return token_f1(answer, gold)
    if how == "contains":
        norm = normalize_answer(answer)
        return float(any(g and normalize_answer(g) in norm for g in gold))
    raise ConfigError(f"unknown gold metric {how!r}", hint=f"choose from {GOLD_METRICS}")


@dataclass
class Cache:
    """Cached EoR votes: per question its gold answers, member answers and similarities."""

    rows: list[dict[str, Any]]
    gold_metric: str = "f1"
    source: str = ""
    members: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    #: the data spec the questions came from (checked by the training-split guard)
    data_spec: str | None = None
    #: how the answers were made: pool, rerank_depth, lm (the reader LM), sources
    meta: dict[str, Any] = field(default_factory=dict)
    #: what reading the cache skipped: malformed_lines, error_rows, no_member_answers
    stats: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.gold_metric not in GOLD_METRICS:
            raise ConfigError(f"unknown gold metric {self.gold_metric!r}",
                              hint=f"choose from {GOLD_METRICS}")
        rows = [r for r in self.rows if r.get("answers")]
        if not self.members:  # rebuild the pool order from the rows (each a subsequence)
            for r in rows:
                specs = list(r["answers"])
                for j, spec in enumerate(specs):
                    if spec in self.members:
                        continue
                    later = [self.members.index(s) for s in specs[j + 1:] if s in self.members]
                    self.members.insert(min(later) if later else len(self.members), spec)
        missing = {s for r in rows for s in r["answers"]} - set(self.members)
        if missing:
            raise DataError(f"cached answers from members not in the pool: {sorted(missing)}")
        if not self.metrics:
            common = None
            for r in rows:
                have = set(r.get("similarities") or {})
                common = have if common is None else common & have
            self.metrics = [m for m in METRICS if common and m in common]
        self.questions = rows
        n, k, m = len(rows), len(self.metrics), len(self.members)
        col = {spec: j for j, spec in enumerate(self.members)}
        self.S = np.zeros((n, k, m, m), dtype=np.float64)
        self.present = np.zeros((n, m), dtype=bool)
        self.correct = np.zeros((n, m), dtype=np.float64)
        for i, r in enumerate(rows):
            specs = list(r["answers"])
            idx = [col[s] for s in specs]
            for a, spec in enumerate(specs):
                self.present[i, idx[a]] = True
                self.correct[i, idx[a]] = _correct(r["answers"][spec], r["gold"],
                                                   self.gold_metric)
            for kk, metric in enumerate(self.metrics):
                mat = np.asarray(r["similarities"][metric], dtype=np.float64)
                if mat.shape != (len(specs), len(specs)):
                    raise DataError(f"question {r.get('id')}: similarities[{metric}] is "
                                    f"{mat.shape}, expected {len(specs)}x{len(specs)}")
                self.S[i, kk][np.ix_(idx, idx)] = mat

    def oracle(self) -> float:
        """Upper bound: a voter that always picks a correct member when one exists."""
        return float(self.correct.max(axis=1).mean()) if len(self.questions) else 0.0

    def member_accuracy(self) -> dict[str, float]:
        return {spec: float(self.correct[:, j].mean()) for j, spec in enumerate(self.members)}

    def fingerprint(self) -> str:
        """Hash of what a trial's value depends on: rows (ids, gold, answers, similarities),
        members and the gold metric. Two caches with the same fingerprint score alike."""
        import hashlib

        body = json.dumps({"gold_metric": self.gold_metric, "members": self.members,
                           "rows": [{k: r.get(k) for k in ("id", "gold", "answers",
                                                          "similarities")}
                                    for r in self.questions]}, sort_keys=True, default=str)
        return "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]

    def ids(self) -> list[str]:
        return [str(r.get("id")) for r in self.questions]

    def to_json(self) -> dict[str, Any]:
        return {"format": CACHE_FORMAT, "source": self.source, "members": self.members,
                "data_spec": self.data_spec, "meta": self.meta, "rows": self.questions}


# ---- the vectorized voter -----------------------------------------------------------------------
def vote_batch(cache: Cache, weights: dict[str, Any]) -> np.ndarray:
    """Winner column per cached question under ``weights`` (-1: no active member)."""
    if not len(cache.questions):
        return np.zeros(0, dtype=int)
    ws = np.array([float((weights.get("metric_weights") or {}).get(m, 0.0))
                   for m in cache.metrics])
    unknown = set(weights.get("metric_weights") or {}) - set(cache.metrics)
    if any((weights.get("metric_weights") or {}).get(m) for m in unknown):
        raise ConfigError(f"metric weights for {sorted(unknown)}, which the cache lacks")
    rw = weights.get("retriever_weights") or {}
    wr = np.array([float(rw.get(spec, 1.0)) for spec in cache.members])
    t = float(weights.get("threshold", DEFAULT_THRESHOLD))
    pooling = weights.get("pooling", "mean")
    eq = float(weights.get("equivalence", 0.5))
    if pooling not in POOLINGS:
        raise ConfigError(f"unknown pooling {pooling!r}", hint=f"choose from {POOLINGS}")
    n, m = cache.present.shape
    combined = np.einsum("k,nkij->nij", ws, cache.S) if len(ws) else np.zeros((n, m, m))
    active = cache.present & (wr > t)[None, :]
    others = active[:, None, :] & ~np.eye(m, dtype=bool)[None, :, :]
    count = others.sum(-1)
    above = ((combined > eq * float(ws.sum())) & others).sum(-1)  # s is a share of Σω^s
    if pooling == "mean":
        pooled = np.where(count > 0, (combined * others).sum(-1) / np.maximum(count, 1), 0.0)
    elif pooling == "max":
        pooled = np.where(count > 0, np.where(others, combined, -np.inf).max(-1), 0.0)
    elif pooling == "majority":
        pooled = (above >= count / 2).astype(np.float64)
    else:  # plurality
        top = np.where(active, above, -1).max(-1, keepdims=True)
        pooled = (above == top).astype(np.float64)
    scores = np.round(wr[None, :] * pooled, 9)
    scores = np.where(active, scores, -np.inf)
    winner = scores.argmax(-1)  # first maximum, as vote() breaks ties
    winner[~active.any(-1)] = -1
    return winner


def accuracy(cache: Cache, weights: dict[str, Any]) -> float:
    """Mean correctness of the voted answer over the cached questions."""
    winner = vote_batch(cache, weights)
    if not len(winner):
        return 0.0
    got = np.where(winner >= 0, cache.correct[np.arange(len(winner)), np.maximum(winner, 0)],
                   0.0)
    return float(got.mean())


# ---- building caches ----------------------------------------------------------------------------
def _row(id_: str, question: str, gold: list[str], pred: dict[str, Any]) -> dict[str, Any]:
    return {"id": id_, "question": question, "gold": [str(g) for g in gold],
            "answers": dict(pred.get("member_answers") or {}),
            "similarities": dict(pred.get("similarities") or {})}


def eor_default(name: str) -> Any:
    """The default of EoR's setting ``name`` (:class:`~ambiqa.programs.eor.EoRConfig`, the one
    source of truth)."""
    return getattr(EoRConfig(), name)


def load_cache(path: str | Path, *, data_spec: str | None = None, gold_metric: str = "f1",
               ) -> Cache:
    """Read a cache JSON (:meth:`Cache.to_json`) or an EoR run's ``results.jsonl``.

    ``results.jsonl`` is read through the evaluation runner's reader
    (:class:`ambiqa.evaluation.runs.runner.ResultsFile`: the last row per example id wins, as on a
    resumed run); rows with an ``error`` and rows without member answers are dropped, and
    lines that are not a JSON object with an id are counted; all three counts land in
    ``cache.stats``. The gold answers come from ``data_spec`` (joined by example id) unless
    the rows carry ``gold``; the data spec, LM, index and pool settings default to the run's
    ``run.json`` beside the file.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"EoR cache not found: {path}")
    if path.suffix == ".json":
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DataError(f"{path} is not valid JSON: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT:
            raise DataError(f"{path} is not an EoR answer cache (format {CACHE_FORMAT})")
        return Cache(doc["rows"], gold_metric, str(path), list(doc.get("members") or []),
                     data_spec=doc.get("data_spec") or data_spec, meta=dict(doc.get("meta") or {}))
    run: dict[str, Any] = {}
    if (path.parent / "run.json").is_file():
        try:
            run = json.loads((path.parent / "run.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise DataError(f"{path.parent / 'run.json'} is unreadable: {exc}") from exc
    run_spec = run.get("data") if isinstance(run.get("data"), str) else None
    if data_spec and run_spec and data_spec.split(":")[:2] != run_spec.split(":")[:2]:
        raise DataError(f"--data {data_spec!r} differs from the run's data {run_spec!r} "
                        f"({path.parent / 'run.json'})",
                        hint="pass the data spec the run used, or leave --data out")
    spec = data_spec or run_spec
    malformed = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                malformed += 1
                continue
            if not isinstance(obj, dict) or "id" not in obj:
                malformed += 1
    gold_by_id: dict[str, list[str]] = {}
    if spec:
        for i, ex in enumerate(load_dataset(spec)):
            gold_by_id[example_id(ex, i)] = gold_answers_of(ex)
    rows, errors, empty = [], 0, 0
    for r in ResultsFile(path).read():
        if r.get("error"):
            errors += 1
            continue
        pred = r.get("prediction") or {}
        if not isinstance(pred, dict) or not pred.get("member_answers"):
            empty += 1
            continue
        gold = r.get("gold") or gold_by_id.get(str(r.get("id")))
        if gold is None:
            raise DataError(f"{path}: no gold answers for example {r.get('id')}",
                            hint="pass the data spec the run used (--data)")
        rows.append(_row(str(r.get("id")), r.get("question", ""), gold, pred))
    config = run.get("program_config") if isinstance(run.get("program_config"), dict) else {}
    meta = {"pool": config.get("pool"),
            "rerank_depth": config.get("rerank_depth", eor_default("rerank_depth")),
            "lm": run.get("lm"), "reader": run.get("reader"),
            "sources": {"Wiki": {"index": run.get("index")}} if run.get("index") else None,
            "run": str(path.parent)}
    cache = Cache(rows, gold_metric, str(path), data_spec=spec, meta=meta,
                  stats={"malformed_lines": malformed, "error_rows": errors,
                         "no_member_answers": empty})
    if meta["pool"] is None:
        meta["pool"] = list(cache.members)
    return cache


def collect_cache(program: Any, examples: list[Any], *, gold_metric: str = "f1",
                  progress: Any = None) -> Cache:
    """Run EoR on ``examples`` with every member active and cache what the voter needs.

    The program is copied and its retriever weights cleared and threshold set to 0, so no
    member is skipped (tuning must see every member's answer).
    """
    runner = program.deepcopy()
    runner.retriever_weights = {}
    runner.threshold = 0.0
    rows = []
    for i, ex in enumerate(examples):
        pred = runner(question=ex.question)
        rows.append(_row(str(getattr(ex, "id", None) or f"ex{i}"), ex.question,
                         gold_answers_of(ex), {"member_answers": pred.member_answers,
                                               "similarities": pred.similarities}))
        if progress is not None:
            progress(i + 1, len(examples))
    import dspy

    specs = sources_of(examples)
    sources = {"Wiki": describe(program.retriever) if program.retriever is not None else None}
    sources.update({name: describe(src) for name, src in sorted(program.sources.items())})
    lm = dspy.settings.lm
    meta = {"pool": list(program.pool), "rerank_depth": program.rerank_depth,
            "lm": getattr(lm, "model", None) if lm is not None else None,
            "sources": sources}
    return Cache(rows, gold_metric, "collect", list(program.pool),
                 data_spec=",".join(specs) or None, meta=meta)
