"""ambiqa's Python API: the library's verbs, the CLI and benchmark scripts call these.

==================================  ===================================================
``index(corpus, name=, kind=)``     build a named index (:mod:`.indexing`)
``open_index(name)``                open it by name; the kind is in its manifest
``evaluate(target, data, ...)``     run and score (:mod:`.jobs`)
``compile(program, train, ...)``    compile with a teleprompter, optionally save
``tune(program, ...)``              Optuna search over demos and knobs
``tune_eor(cache, ...)``            EoR's voter weights from a cache of member answers
``export(target, ...)``             render the prompts
``load(path, ...)``                 an artifact or a program's own ``.save()`` JSON
                                    (every file target loads through :mod:`.loader`)
``resolve(target, ...)``            program name / artifact / saved JSON → program
``asking.ask(program, question)``   one question, as ``ambiqa ask`` asks it
``reports.report(run_dir)``         re-render a finished run (``reports.compare`` too)
``demo.run_demo(lm)``               the main job end to end, as ``ambiqa demo`` runs it
==================================  ===================================================

Each verb takes its settings dataclass (``IndexSettings``, ``EvaluateSettings``,
``CompileSettings``, ``TuneConfig``, ``TuneEorSettings``, ``ExportSettings``) or the same
fields as keywords, and returns a typed result. None takes parsed command-line flags: the
CLI calls these.
"""

from __future__ import annotations

from ambiqa.api.eor import TuneEorResult, TuneEorSettings, tune_eor
from ambiqa.api.indexing import IndexResult, IndexSettings, index, open_index
from ambiqa.api.jobs import (
    CompileResult,
    CompileSettings,
    EvaluatePlan,
    EvaluateResult,
    EvaluateSettings,
    ExportResult,
    ExportSettings,
    LMSpec,
    compile,
    evaluate,
    export,
    tune,
)
from ambiqa.api.targets import Target, is_file_target, load, resolve

__all__ = ["CompileResult", "CompileSettings", "EvaluatePlan", "EvaluateResult",
           "EvaluateSettings", "LMSpec",
           "ExportResult", "ExportSettings", "IndexResult", "IndexSettings", "Target", "compile",
           "evaluate", "export", "index", "is_file_target", "load", "open_index", "resolve",
           "tune", "tune_eor", "TuneEorResult", "TuneEorSettings"]
