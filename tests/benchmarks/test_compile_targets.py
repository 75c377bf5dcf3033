"""benchmarks/compile_targets.py on stored runs: the targets are judged from the numbers."""

from __future__ import annotations

RESCORED = "benchmarks/results/evidence-rescored"


def test_targets_of_the_stored_bootstrap_diva_run(benchmark_script):
    ct = benchmark_script("compile_targets")
    m = ct.measure(f"{RESCORED}/asqa-compiled/diva-bootstrap", ct.ZERO_SHOT, ct.BEST_VANILLA,
                   "benchmarks/results/evidence/compiled/diva-bootstrap.json")
    met = {t["target"].split(" ")[0]: t["met"] for t in m["targets"]}
    # n = 40 < 60 and the interval holds 0; 14-word answers; the verifier never said no
    assert met == {"DR": False, "STR-EM": True, "median": False, "verifier": False}
    assert m["median_words"]["compiled"] == 14
    assert m["median_words"]["writer_demos"] == [30, 77]  # shown longer answers than it wrote
    assert m["signal"]["compiled"]["verify.path"]["predicted"] == {"rag": 40}
    # every gold reading of the 40 shared questions is stated or lost at exactly one step
    assert sum(m["loss_steps"]["compiled"].values()) == sum(m["loss_steps"]["zero_shot"].values())
    assert "| verifier path accuracy >= 0.8, both paths taken |" in ct.render(m, "cmd")
