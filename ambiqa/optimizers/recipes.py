"""Per-program optimization recipes: metric, training split, tunable knobs, teleprompters.

A recipe says how a program is compiled and tuned when the user gives no more than its name:

* ``metric`` -- what the papers report for it: Disambig-F1 for the ASQA-style programs
  (closed_book, vanilla_rag, query_refinement, diva, toc, verdict), token F1 for the
  short-answer ones (resp and ircot on HotpotQA, eor on WebQuestions). ``alt_metrics`` lists
  other sensible choices (``dr`` for ASQA).
* ``train`` -- the default *training* split. EoR uses ``webq:train``: the NQ data here is only
  an ``oracle`` split, which serves as dev data, so NQ has no training split in this set-up.
* ``knobs`` -- the program settings Optuna may tune, named exactly as the program's
  constructor names them (``Diva(top_k=...)`` is the paper's pruning K, ``ToC(max_depth,
  max_nodes)``, ``VerDICt(conservativeness)`` its clustering knob, ``ReSP(max_iter)``).
* ``multi_answer`` -- ambiguity programs learn disambiguation only from questions with two or
  more readings, so their training examples must have at least two qa pairs; a split with
  none (AmbigNQ's single-answer rows, say) is a clear error rather than a silent no-op.

Teleprompters (see :mod:`ambiqa.optimizers.compile`): ``none``, ``labeled``, ``bootstrap``,
``bootstrap-rs``, ``knn``, ``mipro``, ``gepa`` and ``simba``; every predictor of a
multi-predictor program gets its own demos (``gepa`` its own instructions).

Compile metrics for the ASQA programs: ``d-f1`` (the default, as asked), ``dr`` (its ROUGE-L
half penalises dropping content) and ``d-f1-cov`` (mean of D-F1 and STR-EM: an interpretation
the answer does not state costs under both halves) and ``str-rouge`` (mean of STR-EM and
ROUGE-L: needs no reader, the objective while no D-F1 reader is at hand). The default stays
``d-f1`` until a paired comparison on dev shows another one holds up better (see the
issue-34 notes in ``benchmarks/results/compile-v2/``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.optimizers.registry import teleprompter_names
from ambiqa.programs.registry import program_class

#: the teleprompters registered when this module was imported (the built-in ones). A list
#: read later -- the CLI's ``--optimizer`` choices, a recipe's :meth:`Recipe.describe` -- calls
#: :func:`~ambiqa.optimizers.registry.teleprompter_names` then instead, so a teleprompter
#: registered after this import is offered too (issue 44)
TELEPROMPTERS = teleprompter_names()
#: teleprompters a tuning trial may choose (the others cost a whole search per trial)
TUNE_TELEPROMPTERS = ("labeled", "bootstrap", "knn")
#: demo sources a trial may be given (``--teleprompters``): the defaults plus ``signal`` (each
#: signalled predictor's demos chosen against its own signal, :mod:`ambiqa.optimizers.signals`)
TUNE_CHOICES = (*TUNE_TELEPROMPTERS, "signal")


@dataclass(frozen=True)
class Knob:
    """One program setting in the search space: an integer range or a set of choices."""

    name: str
    low: int = 0
    high: int = 0
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: Any) -> Any:
        key = f"program.{self.name}"
        if self.choices:
            return trial.suggest_categorical(key, list(self.choices))
        return trial.suggest_int(key, self.low, self.high)

    def describe(self) -> dict[str, Any]:
        if self.choices:
            return {"name": self.name, "choices": list(self.choices)}
        return {"name": self.name, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class Recipe:
    program: str
    metric: str
    train: str
    knobs: tuple[Knob, ...] = ()
    alt_metrics: tuple[str, ...] = ()
    multi_answer: bool = False
    notes: str = ""
    #: the teleprompters this program may use; None: every one registered when asked
    teleprompters: tuple[str, ...] | None = None

    def describe(self) -> dict[str, Any]:
        return {"program": self.program, "metric": self.metric, "train": self.train,
                "knobs": [k.describe() for k in self.knobs], "alt_metrics": list(self.alt_metrics),
                "multi_answer": self.multi_answer,
                "teleprompters": list(self.teleprompters or teleprompter_names()),
                "notes": self.notes}


_ASQA = "asqa:train"
#: compile metrics besides D-F1 for the ASQA programs (see the module docstring)
_ASQA_ALT = ("dr", "d-f1-cov", "str-rouge")
RECIPES: dict[str, Recipe] = {
    "closed_book": Recipe("closed_book", "d-f1", _ASQA, alt_metrics=_ASQA_ALT, multi_answer=True,
                          notes="one predictor (closed-book long answer); no knobs"),
    "vanilla_rag": Recipe("vanilla_rag", "d-f1", _ASQA, (Knob("k", 3, 10),), _ASQA_ALT, True),
    "query_refinement": Recipe("query_refinement", "d-f1", _ASQA,
                               (Knob("max_interpretations", 2, 8),), _ASQA_ALT, True),
    "diva": Recipe("diva", "d-f1", _ASQA,
                   (Knob("top_k", 3, 8), Knob("k_per_query", 3, 8),
                    Knob("max_interpretations", 2, 8)), _ASQA_ALT, True,
                   notes="top_k is the paper's pruning K (passages kept), k_per_query the "
                         "passages retrieved per reading, max_interpretations the number of "
                         "pseudo-interpretations -- and so of verifier votes, one per reading"),
    "toc": Recipe("toc", "d-f1", _ASQA,
                  (Knob("max_depth", 1, 3), Knob("max_nodes", 3, 10), Knob("k", 3, 8),
                   Knob("verification", choices=("paper", "evidence", "strict"))),
                  _ASQA_ALT, True, notes="max_depth/max_nodes: the tree's depth and breadth; "
                                         "verification: which self-verification prompt"),
    "verdict": Recipe("verdict", "d-f1", _ASQA,
                      (Knob("conservativeness", choices=("recall", "balanced", "precision")),
                       Knob("min_cluster_size", 2, 4), Knob("n_passages", 5, 20)),
                      _ASQA_ALT, True, notes="conservativeness is the clustering knob"),
    "resp": Recipe("resp", "f1", "hotpotqa:train", (Knob("max_iter", 1, 3), Knob("k", 3, 8)),
                   ("em",)),
    "ircot": Recipe("ircot", "f1", "hotpotqa:train", (Knob("max_steps", 1, 4), Knob("k", 3, 8)),
                    ("em",)),
    "eor": Recipe("eor", "f1", "webq:train", (), ("em",),
                  notes="NQ has only an oracle (dev) split here, so EoR trains on WebQ; its "
                        "voter weights are tuned over cached answers by "
                        "ambiqa.optimizers.eor_weights (no LM call per trial)"),
}


def get_recipe(program: str) -> Recipe:
    key = program.strip().lower().replace("-", "_")
    if key not in RECIPES:
        program_class(program)  # raises the registry's helpful "did you mean" error
        raise ConfigError(f"no optimization recipe for program {program!r}")
    return RECIPES[key]


def check_teleprompter(name: str) -> str:
    """``name`` if a teleprompter is registered under it (built-in or added later)."""
    if name not in teleprompter_names():
        raise ConfigError(f"unknown teleprompter {name!r}",
                          hint=f"choose one of {', '.join(teleprompter_names())}")
    return name


# ---- training data ----------------------------------------------------------------------------
_QA_METRICS = {"d-f1", "dr", "str-em", "d-f1-cov", "str-rouge"}


def _n_pairs(example: Any) -> int:
    pairs = getattr(example, "qa_pairs", None) or []
    return sum(1 for p in pairs if isinstance(p, dict) and p.get("question")
               and (p.get("short_answers") or p.get("answers")))


def _has_answers(example: Any) -> bool:
    for key in ("answers", "answer"):
        value = getattr(example, key, None)
        if isinstance(value, str) and value.strip():
            return True
        if isinstance(value, list | tuple) and any(str(v).strip() for v in value):
            return True
    return _n_pairs(example) > 0


def usable_examples(examples: list[Any], recipe: Recipe, metric: str, spec: str = "training set",
                    ) -> list[Any]:
    """The training examples a recipe can learn from; a clear error when none are left.

    ASQA metrics need qa pairs; a ``multi_answer`` recipe needs two or more (disambiguation is
    learned from questions with several readings); short-answer metrics need gold answers.
    """
    if not examples:
        raise ConfigError(f"{spec} is empty")
    if metric in _QA_METRICS:
        need = 2 if recipe.multi_answer else 1
        kept = [ex for ex in examples if _n_pairs(ex) >= need]
        if not kept:
            what = ("multi-answer questions (two or more qa pairs)" if need == 2
                    else "questions with qa pairs")
            raise ConfigError(
                f"no usable training examples in {spec}: none of its {len(examples)} examples "
                f"has {what}, which {recipe.program} learns from with metric {metric}",
                hint="use asqa:train, or AmbigNQ rows annotated multipleQAs")
        return kept
    kept = [ex for ex in examples if _has_answers(ex)]
    if not kept:
        raise ConfigError(f"no usable training examples in {spec}: none has a gold answer")
    return kept


def split_train(examples: list[Any], val_fraction: float = 1 / 3, seed: int = 0,
                ) -> tuple[list[Any], list[Any]]:
    """Split a training split into (train part, held-out part) with a fixed seed.

    The held-out part ("dev of train") scores candidates during search, so the real dev
    split is never touched while optimizing. Needs at least two examples.
    """
    if len(examples) < 2:
        raise ConfigError(f"need at least 2 training examples to hold some out, got "
                          f"{len(examples)}")
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    n_val = min(len(shuffled) - 1, max(1, round(len(shuffled) * val_fraction)))
    return shuffled[n_val:], shuffled[:n_val]
