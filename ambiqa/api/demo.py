"""The main job on the embedded default, end to end: what ``ambiqa demo`` runs.

Index the bundled demo corpus with ColBERT (or open the index built before), compile
``vanilla_rag`` on a few demo training questions -- by default ``labeled`` (gold demos) chosen
against zero-shot on one held-out training question by ``str-rouge`` (no reader needed), the
settings that keep the demo near five minutes on two cores
(``benchmarks/results/demo-timing``) -- save the artifact, export its prompts, load the
artifact as a user would and ask it a demo dev question. Each step goes through the
public verbs (:func:`~ambiqa.api.indexing.index`, :func:`~ambiqa.api.jobs.compile`,
:func:`~ambiqa.api.jobs.export`, :func:`~ambiqa.api.targets.load`); ``say`` hears one
line per step, so the CLI prints progress and a script can log it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.api.indexing import IndexSettings, index, open_index, settings_from
from ambiqa.api.jobs import CompileSettings, ExportSettings, compile, export, make_reader
from ambiqa.api.targets import load
from ambiqa.data import demo_corpus_path, load_dataset
from ambiqa.errors import AmbiqaError


@dataclass
class DemoSettings:
    """What the demo compiles, and where it writes."""

    #: where the artifact and its exported prompts go
    out_dir: str | Path = "artifacts"
    #: directory holding indexes (default ``$AMBIQA_INDEX_ROOT`` or ``$AMBIQA_CACHE/indexes``)
    index_root: str | Path | None = None
    #: the teleprompter compiling vanilla_rag: none, labeled (gold demos, no LM call) or
    #: bootstrap (a traced LM pass over the training questions)
    optimizer: str = "labeled"
    #: the compile's objective: str-rouge needs no reader; d-f1 reads with the D-F1 reader,
    #: the LM stand-in on a machine without a trained extractive reader (an LM call per gold
    #: answer)
    metric: str = "str-rouge"
    #: demo training questions to compile on (one is held out to choose on), and demo dev
    #: questions to score the shipped program on (0: not scored)
    n_train: int = 3
    n_dev: int = 0
    #: demo plans tried beside zero-shot and the teleprompter's result (None: the compile's
    #: defaults, three more programs to score)
    candidates: list[Any] | None = field(default_factory=list)
    #: the question the loaded program answers (None: the last demo dev question)
    question: str | None = None


@dataclass
class DemoResult:
    artifact: Path
    prompts: Path
    question: str
    prediction: Any
    index_seconds: float
    compile_seconds: float
    seconds: float


def _demo_index(root: str | Path | None) -> Any:
    try:
        return open_index("demo", root=root)
    except AmbiqaError:  # not built yet (or unreadable): build it
        return index(demo_corpus_path(), IndexSettings(name="demo", kind="colbert",
                                                       index_root=root))


def run_demo(lm: Any, settings: DemoSettings | None = None,
             say: Callable[[str], None] = lambda line: None, console: Any = None,
             **overrides: Any) -> DemoResult:
    """Run the demo with ``lm`` (see module); ``console`` (rich) shows the compile's own
    progress."""
    cfg = settings_from(settings, DemoSettings, overrides)
    t_start = time.perf_counter()
    out_dir = Path(cfg.out_dir)
    built = _demo_index(cfg.index_root)
    say(f"1/5 index demo ready in {built.seconds:.0f} s")
    say(f"2/5 LM {lm.model} ready")
    artifact = out_dir / "demo-vanilla_rag.json"
    t0 = time.perf_counter()
    compile("vanilla_rag", settings=CompileSettings(
        train=f"demo:train:{cfg.n_train}", dev=f"demo:dev:{cfg.n_dev}" if cfg.n_dev else None,
        metric=cfg.metric, optimizer=cfg.optimizer, k=2, seed=0, out=artifact,
        candidates=cfg.candidates), lm=lm,
        retriever=built.retriever, reader=make_reader(None), console=console)
    compile_seconds = time.perf_counter() - t0
    say(f"3/5 compiled in {compile_seconds:.0f} s")
    prompts = out_dir / "demo-vanilla_rag.prompts.md"
    export(str(artifact), settings=ExportSettings(format="md", out=prompts))
    say(f"4/5 exported prompts to {prompts}")
    loaded = load(artifact, retriever=built.retriever)  # as ambiqa.load does
    # the last dev question: not one a dev scoring answered (that would be a cache hit)
    question = cfg.question or load_dataset("demo:dev")[-1].question
    say(f"5/5 asking the loaded program: {question}")
    prediction = loaded(question=question)
    return DemoResult(artifact, prompts, question, prediction, built.seconds, compile_seconds,
                      time.perf_counter() - t_start)
