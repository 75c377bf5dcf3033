"""Evaluation runs: the resumable runner (:mod:`~ambiqa.evaluation.runs.runner`), its run
directory -- rows, lock, ``run.json`` -- (:mod:`~ambiqa.evaluation.runs.run_dir`) and the
``--part I/N`` slices of one run (:mod:`~ambiqa.evaluation.runs.parts`).

Runs sit above scoring (``ambiqa.evaluation``: metrics, readers, judges, intervals) and below
reports (:mod:`ambiqa.evaluation.reports`), which they never import: the caller hands the
runner its report writer. Nothing is re-exported here, so importing one module loads only
what it needs.
"""
