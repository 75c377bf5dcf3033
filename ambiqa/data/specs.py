"""Dataset specs: one string names a data set, a split and optionally how many examples.

Grammar (case-insensitive names)::

    NAME:SPLIT[:N]          a registered data set under the data root   asqa:train:50
    NAME:SPLIT:A-B          examples A to B of the split (from 1)       nq:oracle:61-160
    FORMAT:PATH[#PART][:N]  any file in a known format                  hotpotqa:/x/dev.json:20
    jsonl:PATH[:N]          your own questions, plain JSON Lines        jsonl:my_questions.jsonl
    demo:train | demo:dev   the small set bundled with ambiqa

``jsonl:`` reads the plain layout of :mod:`ambiqa.data.loaders.plain` (``question`` plus
``answers`` or ``qa_pairs``, optional ``long_answer``); :func:`metrics_for` picks the metrics
its fields support.

``N`` keeps the first N examples; ``A-B`` keeps examples A to B inclusive, counted from 1,
so questions held out from a run on the first N can be named (``nq:oracle:61-160`` beside
``nq:oracle:60``). ``PATH`` is recognised by a path separator, a leading
``.``/``~`` or a ``.json``/``.jsonl`` ending; ``#PART`` picks one split out of a file holding
several (the official ``ASQA.json``). The data root is ``data_root`` if given, else
``$AMBIQA_DATA``, else ``../shared/data`` beside the repository checkout.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import dspy

from ambiqa.data.demo_set import demo_questions_path
from ambiqa.data.loaders import FORMATS
from ambiqa.errors import ConfigError, DataError


@dataclass(frozen=True)
class Split:
    """Where a registered split lives (first existing candidate wins) and its role."""

    candidates: tuple[str, ...]
    training: bool


def _splits(pattern: str, names: dict[str, bool], *extra: str) -> dict[str, Split]:
    return {name: Split((pattern.format(name), *(e.format(name) for e in extra)), training)
            for name, training in names.items()}


_TRAIN_DEV = {"train": True, "dev": False}
_TRAIN_DEV_TEST = {"train": True, "dev": False, "test": False}

# name → (format, splits). Paths are relative to the data root. Several candidates let a user
# drop in the original release under its own file name.
DATASETS: dict[str, tuple[str, dict[str, Split]]] = {
    "asqa": ("asqa", _splits("asqa/{}.json", _TRAIN_DEV, "asqa/ASQA.json#{}")),
    "ambignq": ("ambignq", _splits("ambignq/{}.json", {
        "train_light": True, "dev_light": False, "train": True, "dev": False})),
    "situatedqa": ("situatedqa", _splits("situatedqa/{}.jsonl", {
        f"{kind}.{split}": split == "train"
        for kind in ("temp", "geo") for split in ("train", "dev", "test")})),
    "hotpotqa": ("hotpotqa", {
        "train": Split(("hotpotqa/train.json", "hotpotqa/train.jsonl",
                        "hotpotqa/hotpot_train_v1.1.json"), True),
        "dev": Split(("hotpotqa/dev.jsonl", "hotpotqa/dev.json",
                      "hotpotqa/hotpot_dev_distractor_v1.json"), False),
    }),
    "2wikimultihopqa": ("2wikimultihopqa", _splits(
        "2wikimultihopqa/{}.json", _TRAIN_DEV, "2wikimultihopqa/{}.jsonl")),
    "nq": ("nq", {
        "oracle": Split(("nq/oracle.jsonl", "nq/nq-open-oracle.jsonl.gz"), False),
        **_splits("nq/{}.jsonl", _TRAIN_DEV_TEST, "nq/NQ-open.{}.jsonl"),
    }),
    "triviaqa": ("triviaqa", _splits("triviaqa/{}.json", _TRAIN_DEV_TEST,
                                     "triviaqa/wikipedia-{}.json",
                                     "triviaqa/qa/wikipedia-{}.json")),
    "webq": ("webq", _splits("webq/{}.jsonl", _TRAIN_DEV_TEST,
                             "webq/webquestions.examples.{}.json")),
}
DEMO_SPLITS = {"train": True, "dev": False}
ALIASES = {"2wiki": "2wikimultihopqa", "hotpot": "hotpotqa", "webquestions": "webq",
           "nq-open": "nq", "nq_open": "nq"}

#: the format name of a user's own question file (``jsonl:PATH``): a path, never a split
PLAIN = "jsonl"

#: private attribute load_dataset sets on each example: the spec it came from (DSPy keeps
#: underscore attributes out of an example's fields, so it never reaches a demo or prompt)
SOURCE_ATTR = "_ambiqa_source"

# Words in a file name that mark evaluation data (for FORMAT:PATH specs).
_EVAL_WORDS = {"dev", "test", "val", "valid", "validation", "eval", "oracle", "heldout"}
_PATH_END = re.compile(r"\.(json|jsonl|ndjson)(\.gz)?$", re.IGNORECASE)


@dataclass(frozen=True)
class DatasetSpec:
    """A parsed spec: a registered ``split`` or a ``path`` (with optional ``part``)."""

    name: str
    split: str | None = None
    path: str | None = None
    part: str | None = None
    limit: int | None = None
    #: with ``limit``: the first example kept, counted from 1 (``A`` of ``A-B``)
    start: int | None = None

    @property
    def format(self) -> str:
        if self.name == "demo":
            return "asqa"
        return PLAIN if self.name == PLAIN else DATASETS[self.name][0]

    def __str__(self) -> str:
        target = self.split if self.path is None else (
            self.path + (f"#{self.part}" if self.part else ""))
        if self.start is not None and self.limit:
            return f"{self.name}:{target}:{self.start}-{self.limit}"
        return f"{self.name}:{target}" + (f":{self.limit}" if self.limit else "")


def _choices() -> str:
    return ", ".join(["demo", *DATASETS, f"{PLAIN} (a file of your own)"])


def _looks_like_path(text: str) -> bool:
    return ("/" in text or "\\" in text or text.startswith((".", "~"))
            or bool(_PATH_END.search(text.split("#", 1)[0])))


def parse_spec(spec: object) -> DatasetSpec:
    """Parse ``NAME:SPLIT[:N]`` or ``FORMAT:PATH[#PART][:N]``; raises only ConfigError."""
    if not isinstance(spec, str):
        raise ConfigError(f"a dataset spec must be a string, got {type(spec).__name__}")
    text = spec.strip()
    name, sep, rest = text.partition(":")
    name = ALIASES.get(name.strip().lower(), name.strip().lower())
    if not sep or not name or not rest.strip():
        raise ConfigError(f"bad dataset spec {spec!r}: expected NAME:SPLIT[:N] or "
                          f"FORMAT:PATH[:N] (data sets: {_choices()})",
                          hint="e.g. asqa:dev, asqa:train:50, hotpotqa:/data/dev.jsonl")
    if name not in ("demo", PLAIN) and name not in DATASETS:
        raise ConfigError(f"unknown data set {name!r} in spec {spec!r}; choose one of: "
                          f"{_choices()}")
    limit = start = None
    head, colon, tail = rest.rpartition(":")
    span = re.fullmatch(r"\s*([0-9]{1,12})\s*-\s*([0-9]{1,12})\s*", tail) if colon else None
    if colon and re.fullmatch(r"\s*[+-]?[0-9]{1,12}\s*", tail):
        limit = int(tail)
        if limit < 1:
            raise ConfigError(f"bad dataset spec {spec!r}: the example count must be at least "
                              f"1, got {limit}")
        rest = head
    elif span:
        start, limit = int(span.group(1)), int(span.group(2))
        if not 1 <= start <= limit:
            raise ConfigError(f"bad dataset spec {spec!r}: a range A-B needs 1 <= A <= B, "
                              f"got {start}-{limit}", hint="e.g. nq:oracle:61-160")
        rest = head
    rest = rest.strip()
    if not rest:
        raise ConfigError(f"bad dataset spec {spec!r}: no split or path given")
    if name != "demo" and _looks_like_path(rest):
        path, _, part = rest.partition("#")
        if not path.strip():
            raise ConfigError(f"bad dataset spec {spec!r}: empty path")
        return DatasetSpec(name, path=path.strip(), part=part.strip() or None, limit=limit,
                           start=start)
    if name == PLAIN:  # a plain question file is always a path, even a bare "questions.txt"
        path, _, part = rest.partition("#")
        return DatasetSpec(name, path=path.strip(), part=part.strip() or None, limit=limit,
                           start=start)
    split = rest.lower()
    splits = DEMO_SPLITS if name == "demo" else DATASETS[name][1]
    if split not in splits:
        raise ConfigError(f"unknown split {rest!r} for {name} in spec {spec!r}; choose one of: "
                          f"{', '.join(splits)}" + ("" if name == "demo" else
                                                    f", or give a file: {name}:/path/file"))
    return DatasetSpec(name, split=split, limit=limit, start=start)


def is_training_split(spec: str | DatasetSpec) -> bool:
    """Whether a spec may be used to train/compile (optimizers refuse dev/test/oracle data).

    Registered splits carry their role. A file counts as evaluation data when its name or its
    ``#PART`` contains dev/test/val/eval/oracle as a word (``ASQA.json#train`` trains,
    ``dev.json#train`` does not); any other file name is taken as training data.
    """
    parsed = spec if isinstance(spec, DatasetSpec) else parse_spec(spec)
    if parsed.path is None:
        assert parsed.split is not None
        if parsed.name == "demo":
            return DEMO_SPLITS[parsed.split]
        return DATASETS[parsed.name][1][parsed.split].training
    label = f"{Path(parsed.path).name} {parsed.part or ''}"
    words = {w for w in re.split(r"[^a-z0-9]+", label.lower()) if w}
    return not (words & _EVAL_WORDS)


def default_data_root() -> Path | None:
    """``$AMBIQA_DATA``, else ``../shared/data`` beside the repository checkout, else None."""
    env = os.environ.get("AMBIQA_DATA")
    if env:
        return Path(env).expanduser()
    beside = Path(__file__).resolve().parents[3] / "shared" / "data"
    return beside if beside.is_dir() else None


def resolve_path(spec: DatasetSpec, data_root: Path | None = None) -> tuple[Path, str | None]:
    """The file (and part inside it) a spec reads; a missing file is a DataError naming it."""
    if spec.name == "demo":
        return demo_questions_path(), spec.split
    if spec.path is not None:
        path = Path(spec.path).expanduser()
        if not path.is_file():
            raise DataError(f"data file not found: {path} (from spec '{spec}')")
        return path, spec.part
    root = Path(data_root).expanduser() if data_root is not None else default_data_root()
    if root is None:
        raise DataError(f"no data root for spec '{spec}'",
                        hint="set AMBIQA_DATA to the data folder, pass data_root, or give a "
                             "file: FORMAT:/path/file")
    assert spec.split is not None
    candidates = DATASETS[spec.name][1][spec.split].candidates
    for candidate in candidates:
        rel, _, part = candidate.partition("#")
        if (root / rel).is_file():
            return root / rel, part or None
    others = [str(root / c.partition("#")[0]) for c in candidates[1:]]
    raise DataError(f"data file not found: {root / candidates[0].partition('#')[0]} "
                    f"(for spec '{spec}')",
                    hint="put the file there" + (f" (or one of: {', '.join(others)})"
                                                 if others else "")
                    + ", set AMBIQA_DATA, or give a file: FORMAT:/path/file")


def load_dataset(spec: str | DatasetSpec, data_root: str | Path | None = None
                 ) -> list[dspy.Example]:
    """Load the examples a spec names (see the module docstring for the grammar)."""
    parsed = spec if isinstance(spec, DatasetSpec) else parse_spec(spec)
    path, part = resolve_path(parsed, Path(data_root) if data_root is not None else None)
    examples = FORMATS[parsed.format](path, limit=parsed.limit, section=part)
    if parsed.start is not None:  # ids come from file positions, so slicing keeps them
        examples = examples[parsed.start - 1:]
    for ex in examples:  # provenance for the optimizers' training-split guard
        object.__setattr__(ex, SOURCE_ATTR, str(parsed))
    return examples
