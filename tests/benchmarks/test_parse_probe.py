"""benchmarks/parse_probe.py: sorting failed parses into forms, and the table (no LM)."""

from __future__ import annotations

from benchmarks import parse_probe as pp


def _p(sig: str, ok: bool, text: str = "", error: str = "", adapter: str = "ChatAdapter"):
    return {"adapter": adapter, "signature": sig, "ok": ok, "text": text, "error": error}


def test_forms_of_failure() -> None:
    field = "Failed to parse field interpretations with value ..."
    assert pp.classify(_p("P", False, "[[ ## interpretations ## ]]\n- a?\n- b?\n", field)) \
        == "list as Markdown, distinct"
    assert pp.classify(_p("P", False, "[[ ## interpretations ## ]]\n- a?\n- a?\n", field)) \
        == "list as Markdown, repeats an item"
    assert pp.classify(_p("T", False, "[[ ## reason ## ]]\nit could be asking about the")) \
        == "cut at the cap"
    assert pp.classify(_p("T", False, "[[ ## reason ## ]]\nTwo films.")) \
        == "stopped without a field"


def test_the_table_counts_first_tries_and_recoveries() -> None:
    rows = [{"question": "q1", "parses": [
        _p("TypeAmbiguity", False, "[[ ## reason ## ]]\nand so on and"),
        _p("TypeAmbiguity", True, adapter="JSONAdapter"),
        _p("PseudoInterpretations", True)]},
        {"question": "q2", "parses": [_p("TypeAmbiguity", True),
                                      _p("PseudoInterpretations", True)]}]
    text = pp.report(rows)
    assert "| TypeAmbiguity | 2 | 1 | 1 | cut at the cap: 1 |" in text
    assert "| PseudoInterpretations | 2 | 0 | 0 | – |" in text
