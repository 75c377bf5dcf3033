"""The user-guide example runs end to end against the scripted fake LM, in two processes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_own_corpus_example(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("own_corpus", ROOT / "examples/own_corpus.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    from dspy.dsp.utils.settings import main_thread_config

    saved = dict(main_thread_config)
    try:
        assert example.main(["--lm", "fake", "--workdir", str(tmp_path)]) == 0
    finally:
        main_thread_config.clear()
        main_thread_config.update(saved)
    out = capsys.readouterr().out
    assert "indexed 11 passages as bm25:notes" in out
    result = json.loads(out[out.index("\n{") + 1:out.rindex("}") + 1])  # the child's JSON
    assert result["callback_lm_ends"] == result["lm_calls"] == 6  # the user's callback: all
    manifest = json.loads((tmp_path / "diva.json").read_text())["manifest"]
    # the scripted LM answers alike with and without demos, so no labeled candidate beats
    # zero-shot on the held-out questions and the compile ships zero-shot, saying so
    selection = manifest["optimizer"]["selection"]
    assert selection["shipped"] == "zero-shot" and "no candidate beat zero-shot" in out
    assert result["demos"]["clarify.clarify"] == 0  # what shipped is what loads
    cited = {pid for it in result["interpretations"] for pid in it["passages"]}
    notes = {p.name for p in (ROOT / "examples" / "notes").glob("*.txt")}
    assert "paris_france.txt" in cited and cited <= notes  # ids are the file paths
    assert manifest["optimizer"]["name"] == "labeled" and manifest["program"] == "diva"
    assert manifest["train"].startswith("jsonl:")
