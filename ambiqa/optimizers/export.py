"""Export a compiled program's prompts so they can be used, reviewed or diffed outside ambiqa.

For every predictor the exporter asks DSPy's ChatAdapter -- the adapter that formats real
calls -- to format the predictor's signature, instructions and demos with ``{field}``
placeholders in place of the inputs. Filling the placeholders and sending the messages to the
same LM reproduces the call DSPy would make; :func:`verify_export` checks exactly that.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
from dspy.adapters.chat_adapter import ChatAdapter

from ambiqa.errors import ConfigError

FORMATS = ("md", "json")


def placeholder(name: str) -> str:
    return "{" + name + "}"


def predictor_prompt(name: str, predictor: Any) -> dict[str, Any]:
    """The messages DSPy would send for ``predictor``, inputs left as ``{field}``."""
    signature = predictor.signature
    inputs = {k: placeholder(k) for k in signature.input_fields}
    messages = ChatAdapter().format(signature, demos=list(predictor.demos), inputs=inputs)
    return {
        "predictor": name,
        "signature": signature.__name__,
        "instructions": signature.instructions,
        "input_fields": list(signature.input_fields),
        "output_fields": list(signature.output_fields),
        "n_demos": len(predictor.demos),
        "messages": messages,
    }


def export_prompts(program: dspy.Module) -> list[dict[str, Any]]:
    prompts = [predictor_prompt(n, p) for n, p in program.named_predictors()]
    if not prompts:
        raise ConfigError("this program has no predictors to export")
    return prompts


def render(prompts: list[dict[str, Any]], fmt: str = "md", manifest: dict | None = None) -> str:
    if fmt == "json":
        return json.dumps({"manifest": manifest or {}, "prompts": prompts}, indent=2,
                          ensure_ascii=False)
    if fmt != "md":
        raise ConfigError(f"unknown export format {fmt!r}", hint=f"choose one of {FORMATS}")
    lines: list[str] = []
    if manifest:
        lines += [f"# Prompts of `{manifest.get('program')}`", "",
                  f"- compiled with: {manifest.get('optimizer', {}).get('name')} "
                  f"against {manifest.get('metric')} (reader: {manifest.get('reader')})",
                  f"- LM: {manifest.get('lm')}", f"- created: {manifest.get('created')}", ""]
    for p in prompts:
        lines += [f"## {p['predictor']} — `{p['signature']}` ({p['n_demos']} demos)", "",
                  f"Inputs: {', '.join(p['input_fields'])}; outputs: "
                  f"{', '.join(p['output_fields'])}. Replace each `{{field}}` in the last "
                  "message with the input value.", ""]
        for m in p["messages"]:
            lines += [f"### {m['role']}", "", "````text", m["content"], "````", ""]
    return "\n".join(lines)


def fill(messages: list[dict[str, str]], inputs: dict[str, Any]) -> list[dict[str, str]]:
    """Put input values into the placeholders of the final user message.

    Values are formatted the way ChatAdapter formats them, so a filled export is the same text
    DSPy sends.
    """
    out = [dict(m) for m in messages]
    last = out[-1]["content"]
    for key, value in inputs.items():
        from dspy.adapters.utils import format_field_value

        rendered = format_field_value(field_info=None, value=value) if not isinstance(
            value, str) else value
        last = last.replace(placeholder(key), rendered)
    out[-1]["content"] = last
    return out


def verify_export(program: dspy.Module, examples: list[dict[str, dict[str, Any]]],
                  lm: Any) -> list[dict[str, Any]]:
    """Send filled exported prompts straight to ``lm`` and compare with DSPy's own outputs.

    ``examples`` maps predictor name → inputs. For each, the predictor is run through DSPy
    and the exported prompt, filled with the same inputs, is sent to the LM outside any
    module; both replies are parsed with the adapter and compared. Needs deterministic
    decoding (temperature 0) and no response cache differences.
    """
    results = []
    predictors = dict(program.named_predictors())
    adapter = ChatAdapter()
    for item in examples:
        for name, inputs in item.items():
            predictor = predictors[name]
            prompt = predictor_prompt(name, predictor)
            with dspy.context(lm=lm, adapter=adapter):
                dspy_out = predictor(**inputs)
            raw = lm(messages=fill(prompt["messages"], inputs))
            text = raw[0] if isinstance(raw, list) else raw
            text = text.get("text", "") if isinstance(text, dict) else str(text)
            parsed = adapter.parse(predictor.signature, text)
            expected = {k: dspy_out[k] for k in predictor.signature.output_fields}
            results.append({"predictor": name, "match": _same(parsed, expected),
                            "exported": _plain(parsed), "dspy": _plain(expected)})
    return results


def _plain(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj


def _same(a: Any, b: Any) -> bool:
    return json.dumps(_plain(a), sort_keys=True, default=str) == json.dumps(
        _plain(b), sort_keys=True, default=str)
