"""Export a compiled program's prompts so they can be used, reviewed or diffed outside ambiqa.

For every predictor the exporter asks DSPy's ChatAdapter -- the adapter that formats real
calls -- to format the predictor's signature, instructions and demos with ``{field}``
placeholders in place of the inputs. Filling the placeholders and sending the messages to the
same LM reproduces the call DSPy would make; :func:`verify_export` checks exactly that.

Formats: ``md`` (for reading and review), ``json`` (messages with ``{field}`` placeholders, for
code) and ``jinja`` (one Jinja2 macro per predictor taking the input fields as arguments and
rendering the messages, each after a ``[[role:NAME]]`` line; :func:`messages_from_jinja`
renders and splits it). Input values go in already rendered as text, as DSPy renders them.

Uncompiled programs: exporting a program that was never compiled (an artifact made with
``--optimizer none``, or a bare program name on the CLI) is allowed and gives its zero-shot
prompts; the rendering says so ("uncompiled: zero-shot prompts") so nobody mistakes them for
optimized ones. knn-compiled predictors export their whole demo pool; at run time each call
shows only the nearest ``k`` of them, and :func:`verify_export` selects them the same way.
"""

from __future__ import annotations

import json
import re
from typing import Any

import dspy
from dspy.adapters.chat_adapter import ChatAdapter

from ambiqa.errors import ConfigError
from ambiqa.optimizers.splits import guard_warning

FORMATS = ("md", "json", "jinja")
ROLE_LINE = "[[role:{}]]"


def placeholder(name: str) -> str:
    return "{" + name + "}"


def predictor_prompt(name: str, predictor: Any,
                     select_for: dict[str, Any] | None = None) -> dict[str, Any]:
    """The messages DSPy would send for ``predictor``, inputs left as ``{field}``.

    ``select_for``: for a knn predictor, format the demos it would pick for these inputs
    (otherwise its whole pool)."""
    signature = predictor.signature
    inputs = {k: placeholder(k) for k in signature.input_fields}
    demos = list(predictor.demos)
    # a knn predictor shows only its k nearest demos per call: pick them for ``select_for``,
    # else show the whole pool and record k so the reader knows a call sees only k of them
    knn_k = getattr(predictor, "knn_k", None) if hasattr(predictor, "_knn_select") else None
    if knn_k is not None and len(demos) <= knn_k:
        knn_k = None  # the pool is what every call shows
    if select_for is not None and knn_k is not None:
        demos = predictor._knn_select(select_for)
        knn_k = None
    messages = ChatAdapter().format(signature, demos=demos, inputs=inputs)
    return {
        "predictor": name,
        "signature": signature.__name__,
        "instructions": signature.instructions,
        "input_fields": list(signature.input_fields),
        "output_fields": list(signature.output_fields),
        "n_demos": len(demos),
        "knn_k": knn_k,
        "messages": messages,
    }


def export_prompts(program: dspy.Module) -> list[dict[str, Any]]:
    prompts = [predictor_prompt(n, p) for n, p in program.named_predictors()]
    if not prompts:
        raise ConfigError("this program has no predictors to export")
    return prompts


def is_uncompiled(manifest: dict | None, prompts: list[dict[str, Any]]) -> bool:
    name = ((manifest or {}).get("optimizer") or {}).get("name")
    return name in (None, "none") and not any(p["n_demos"] for p in prompts)


def provenance(manifest: dict[str, Any]) -> list[str]:
    """What the file says about how its prompts came to be, one bullet per fact it records:
    nothing is printed as "None". A program's own ``.save()`` has no compile manifest and says
    so; a program exported by name is the program as written."""
    if manifest.get("source") == "prog.save":
        return ["- a plain DSPy save (`prog.save`): no compile manifest, so the optimizer, "
                "metric and LM are not recorded"]
    optimizer = (manifest.get("optimizer") or {}).get("name")
    metric, reader = manifest.get("metric"), manifest.get("reader")
    if optimizer in (None, "none") and not metric:
        return ["- not compiled: the program as written"]
    lines = [f"- compiled with: {optimizer or 'an unrecorded optimizer'}"
             + (f" against {metric}" if metric else "")
             + (f" (reader: {reader})" if reader else "")]
    lines += [f"- {label}: {manifest[key]}" for key, label in (("lm", "LM"), ("created", "created"))
              if manifest.get(key)]
    return lines + choice_lines(manifest.get("optimizer") or {})


def choice_lines(optimizer: dict[str, Any]) -> list[str]:
    """The per-predictor demo plan and the validation-split choice, as the manifest records
    them (:mod:`ambiqa.optimizers.demo_plan`, :mod:`ambiqa.optimizers.select`)."""
    lines = []
    plan = optimizer.get("demo_plan") or {}
    if plan:
        lines.append("- demos per predictor: " + ", ".join(
            f"{name}={v.get('source')} ({v.get('demos', 0)})" for name, v in plan.items()))
    sel = optimizer.get("selection") or {}
    if sel.get("skipped"):
        lines.append(f"- not checked against zero-shot: {sel['skipped']}")
    elif sel.get("reason"):
        how = sel.get("statistic")
        scored = f" (scored as {how})" if how and how != "mean over the questions" else ""
        lines.append(f"- chosen on the validation split{scored}: {sel['reason']}")
        for row in sel.get("candidates") or []:
            ci = row.get("interval_vs_zero_shot")
            lines.append(f"  - {row.get('label')}: {sel.get('metric')} {row.get('mean', 0):.3f}"
                         + (f", vs zero-shot {row.get('diff_vs_zero_shot', 0):+.3f} "
                            f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")
                         + f", {row.get('lm_calls', 0)} LM calls")
    return lines


def render(prompts: list[dict[str, Any]], fmt: str = "md", manifest: dict | None = None) -> str:
    if fmt == "jinja":
        return render_jinja(prompts, manifest)
    if fmt == "json":
        return json.dumps({"manifest": manifest or {}, "prompts": prompts}, indent=2,
                          ensure_ascii=False)
    if fmt != "md":
        raise ConfigError(f"unknown export format {fmt!r}", hint=f"choose one of {FORMATS}")
    lines: list[str] = []
    loud = guard_warning(manifest)
    if loud:
        lines += [f"> WARNING: {loud}", ""]
    if is_uncompiled(manifest, prompts):
        lines += ["> uncompiled: zero-shot prompts (no demos, instructions as written)", ""]
    if manifest:
        lines += [f"# Prompts of `{manifest.get('program')}`", "", *provenance(manifest), ""]
    for p in prompts:
        shown = (f"; each call shows the {p['knn_k']} nearest to its input"
                 if p.get("knn_k") else "")
        lines += [f"## {p['predictor']} — `{p['signature']}` ({p['n_demos']} demos{shown})", "",
                  f"Inputs: {', '.join(p['input_fields'])}; outputs: "
                  f"{', '.join(p['output_fields'])}. Replace each `{{field}}` in the last "
                  "message with the input value.", ""]
        for m in p["messages"]:
            lines += [f"### {m['role']}", "", "````text", m["content"], "````", ""]
    return "\n".join(lines)


def _jinja_name(predictor: str) -> str:
    return re.sub(r"\W", "_", predictor)


def _jinja_text(content: str, fields: list[str]) -> str:
    """Template text for one message: literal parts raw, ``{field}`` → ``{{ field }}``."""
    if not fields:
        parts = [content]
    else:
        parts = re.split("(" + "|".join(re.escape(placeholder(f)) for f in fields) + ")", content)
    out = []
    for part in parts:
        if fields and part in {placeholder(f) for f in fields}:
            out.append("{{ " + part[1:-1] + " }}")
        elif part:
            safe = part.replace("{% endraw %}", "{% endraw %}{{ '{% endraw %}' }}{% raw %}")
            out.append("{% raw %}" + safe + "{% endraw %}")
    return "".join(out)


def render_jinja(prompts: list[dict[str, Any]], manifest: dict | None = None) -> str:
    """One Jinja2 macro per predictor; see :func:`messages_from_jinja`."""
    head = [f"{{# ambiqa prompts of {(manifest or {}).get('program', 'a program')}: one macro "
            "per predictor; call it with the input fields (rendered as text) #}"]
    loud = guard_warning(manifest)
    if loud:
        head.append("{# WARNING: " + loud.replace("#}", "# }") + " #}")
    if is_uncompiled(manifest, prompts):
        head.append("{# uncompiled: zero-shot prompts #}")
    blocks = []
    for p in prompts:
        body = "".join("\n" + ROLE_LINE.format(m["role"]) + "\n"
                       + _jinja_text(m["content"], p["input_fields"] if i == len(
                           p["messages"]) - 1 else [])
                       for i, m in enumerate(p["messages"]))
        blocks.append(f"{{# {p['predictor']}: {p['signature']}, {p['n_demos']} demos #}}"
                      f"{{% macro {_jinja_name(p['predictor'])}("
                      f"{', '.join(p['input_fields'])}) %}}{body}\n{{% endmacro %}}")
    return "\n".join(head + blocks) + "\n"


def messages_from_jinja(template: str, predictor: str,
                        inputs: dict[str, Any]) -> list[dict[str, str]]:
    """Render a predictor's macro from a ``jinja`` export into chat messages."""
    import jinja2

    env = jinja2.Environment(autoescape=False, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    module = env.from_string(template).module
    macro = getattr(module, _jinja_name(predictor), None)
    if macro is None:
        raise ConfigError(f"no macro for predictor {predictor!r} in this template")
    text = str(macro(**{k: _render_value(v) for k, v in inputs.items()}))
    pieces = re.split(r"\n\[\[role:(\w+)\]\]\n", text)
    messages = [{"role": pieces[i], "content": pieces[i + 1]} for i in range(1, len(pieces), 2)]
    if messages and messages[-1]["content"].endswith("\n"):
        messages[-1]["content"] = messages[-1]["content"][:-1]
    return messages


def _render_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    from dspy.adapters.utils import format_field_value

    return format_field_value(field_info=None, value=value)


def fill(messages: list[dict[str, str]], inputs: dict[str, Any]) -> list[dict[str, str]]:
    """Put input values into the placeholders of the final user message.

    Values are formatted the way ChatAdapter formats them, so a filled export is the same text
    DSPy sends.
    """
    out = [dict(m) for m in messages]
    last = out[-1]["content"]
    for key, value in inputs.items():
        last = last.replace(placeholder(key), _render_value(value))
    out[-1]["content"] = last
    return out


class _SentMessages:
    """A DSPy callback that records the messages of every LM call made inside it."""

    def __init__(self) -> None:
        from dspy.utils.callback import BaseCallback

        sent: list[list[dict[str, Any]]] = []
        self.sent = sent

        class _Cb(BaseCallback):
            def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
                sent.append([dict(m) for m in (inputs.get("messages") or [])])

        self.callback = _Cb()


def first_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str | None:
    """Where two message lists first differ (None when equal, text exact)."""
    if len(a) != len(b):
        return f"{len(a)} messages vs {len(b)}"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x.get("role") != y.get("role"):
            return f"message {i}: role {x.get('role')!r} vs {y.get('role')!r}"
        cx, cy = str(x.get("content")), str(y.get("content"))
        if cx != cy:
            at = next((j for j, (u, v) in enumerate(zip(cx, cy, strict=False)) if u != v),
                      min(len(cx), len(cy)))
            return (f"message {i} ({x.get('role')}), character {at}: "
                    f"{cx[max(0, at - 30):at + 30]!r} vs {cy[max(0, at - 30):at + 30]!r}")
    return None


def verify_export(program: dspy.Module, examples: list[dict[str, dict[str, Any]]],
                  lm: Any, via: str = "json") -> list[dict[str, Any]]:
    """Check that the exported prompts are what DSPy sends, then that they answer alike.

    ``examples`` maps predictor name → inputs. For each, the predictor is run through DSPy
    with a callback recording the messages it sends to the LM. Step 1 (``prompt_match``):
    the exported prompt filled with the same inputs must equal those messages exactly (role
    and text). Step 2 (``output_match``): the filled export is sent to the LM outside any
    module, parsed with the adapter, and compared with DSPy's outputs (needs deterministic
    decoding). ``match`` is both. ``via="jinja"`` renders the prompt from the Jinja export
    instead of filling the JSON placeholders.
    """
    if via not in ("json", "md", "jinja"):
        raise ConfigError(f"unknown export format {via!r}", hint=f"choose one of {FORMATS}")
    results = []
    predictors = dict(program.named_predictors())
    adapter = ChatAdapter()
    for item in examples:
        for name, inputs in item.items():
            predictor = predictors[name]
            prompt = predictor_prompt(name, predictor, select_for=inputs)
            recorder = _SentMessages()
            callbacks = [*dspy.settings.callbacks, recorder.callback]
            with dspy.context(lm=lm, adapter=adapter, callbacks=callbacks):
                dspy_out = predictor(**inputs)
            if via == "jinja":
                messages = messages_from_jinja(render_jinja([prompt]), name, inputs)
            else:
                messages = fill(prompt["messages"], inputs)
            sent = recorder.sent[0] if recorder.sent else []
            prompt_diff = (first_difference(messages, sent) if sent
                           else "DSPy sent no LM call")
            raw = lm(messages=messages)
            text = raw[0] if isinstance(raw, list) else raw
            text = text.get("text", "") if isinstance(text, dict) else str(text)
            parsed = adapter.parse(predictor.signature, text)
            expected = {k: dspy_out[k] for k in predictor.signature.output_fields}
            output_match = _same(parsed, expected)
            results.append({"predictor": name, "prompt_match": prompt_diff is None,
                            "prompt_difference": prompt_diff, "output_match": output_match,
                            "match": prompt_diff is None and output_match,
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


def capture_inputs(program: dspy.Module, questions: list[str]) -> list[dict[str, dict[str, Any]]]:
    """Run ``program`` on ``questions`` and record, per question, the inputs each predictor
    received on its first call (what :func:`verify_export` replays)."""
    from dspy.utils.callback import BaseCallback

    names = {id(p): n for n, p in program.named_predictors()}
    captured: list[dict[str, dict[str, Any]]] = []

    class _Capture(BaseCallback):
        def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
            name = names.get(id(instance))
            if name is None or not captured or name in captured[-1]:
                return
            args = inputs.get("kwargs", inputs) if isinstance(inputs, dict) else {}
            fields = instance.signature.input_fields
            captured[-1][name] = {k: v for k, v in args.items() if k in fields}

    callbacks = [*dspy.settings.callbacks, _Capture()]
    for q in questions:
        captured.append({})
        with dspy.context(callbacks=callbacks):
            program(question=q)
    return captured
