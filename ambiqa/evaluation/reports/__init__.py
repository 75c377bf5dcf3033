"""Reports over finished runs: a run's summary and report
(:mod:`~ambiqa.evaluation.reports.report`, reading rows through
:mod:`~ambiqa.evaluation.reports.run_data`), comparisons of runs
(:mod:`~ambiqa.evaluation.reports.compare`), merging the parts of one run
(:mod:`~ambiqa.evaluation.reports.merge`), plots (matplotlib on first use) and the HTML page
(:mod:`~ambiqa.evaluation.reports.html`).

Reports sit above runs (:mod:`ambiqa.evaluation.runs`) and scoring. Nothing is re-exported
here, so importing one module loads only what it needs.
"""
