"""DSPy's ChatAdapter, reading a list field that the LM wrote as a Markdown list, and cutting a
reply stuck in a repetition loop to its first copy (:mod:`ambiqa.lm.loop_guard`).

Why: a ``list[str]`` output field (Diva's pseudo-interpretations, for one) is parsed by DSPy as
JSON or a Python literal. The 1.5B often writes it the way people write lists instead::

    [[ ## interpretations ## ]]
    - Who won the 2018 final?
    - Who won the 2019 final?

ChatAdapter then raises, and DSPy repeats the whole call with the JSONAdapter: the prompt is
paid again and the second reply replaces the first. In the stored ASQA rows of zero-shot Diva
this retry followed 11 of 71 ``PseudoInterpretations`` calls (``python -m
benchmarks.signature_budget``); in a probe of 30 ASQA dev questions the one failure of this
signature was this form. :class:`ListTolerantChatAdapter` formats prompts exactly as
ChatAdapter does (the LM sees the same request); only when ChatAdapter's parse fails does it
read each list-typed field written as ``-``, ``*``, ``•`` or ``1.`` / ``1)`` lines as that
list, if its items are distinct, and parse once more. A list that repeats an item (the probe's
case: the question itself three times) is a degenerate reply and keeps DSPy's retry, whose
JSON reply was the better one there. Anything else that fails still fails the same way (and
still falls back to the JSONAdapter). :func:`ambiqa.lm.factory.configure` installs it unless
an adapter is given.
"""

from __future__ import annotations

import json
import re
import typing
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from ambiqa.lm.loop_guard import cut_loop, guard_enabled
from ambiqa.tracing import record_loop_cut

_HEADER = re.compile(r"\[\[ ## (\w+) ## \]\]")
_ITEM = re.compile(r"^\s*(?:[-*•]|\d{1,3}[.)])\s+(.*\S)\s*$")


def _is_list_field(annotation: Any) -> bool:
    """``list[str]`` (or a bare ``list``): the fields a Markdown list can stand for."""
    if annotation is list:
        return True
    args = typing.get_args(annotation)
    return typing.get_origin(annotation) is list and (not args or args[0] is str)


def markdown_list(text: str) -> list[str] | None:
    """The items of ``text`` when every non-empty line is a list item, else None."""
    lines = [line for line in text.splitlines() if line.strip()]
    items = [_ITEM.match(line) for line in lines]
    if not lines or not all(items):
        return None
    return [m.group(1).strip() for m in items if m is not None]


def rewrite_lists(signature: type[dspy.Signature], completion: str) -> str | None:
    """``completion`` with each list-typed output section written as a Markdown list turned
    into a JSON array; None when there is nothing to rewrite."""
    parts = _HEADER.split(completion)  # [before, name, body, name, body, ...]
    changed = False
    for i in range(1, len(parts) - 1, 2):
        field = signature.output_fields.get(parts[i])
        if field is None or not _is_list_field(field.annotation):
            continue
        items = markdown_list(parts[i + 1])
        # a list that repeats an item is a degenerate reply (the probe's one case: the same
        # question three times); the JSONAdapter retry then gets its chance, as before
        if items is not None and len({" ".join(x.lower().split()) for x in items}) == len(items):
            parts[i + 1] = "\n" + json.dumps(items, ensure_ascii=False) + "\n\n"
            changed = True
    if not changed:
        return None
    return "".join(f"[[ ## {p} ## ]]" if i % 2 else p for i, p in enumerate(parts))


class ListTolerantChatAdapter(dspy.ChatAdapter):
    """ChatAdapter that also reads a list field written as a Markdown list (see module)."""

    def parse(self, signature: type[dspy.Signature], completion: str) -> dict[str, Any]:
        if guard_enabled():  # a reply stuck in a loop keeps one copy (ambiqa.lm.loop_guard)
            cut = cut_loop(completion)
            if cut is not None:
                record_loop_cut(signature.__name__)
                completion = cut
        try:
            return _chat_parse(self, signature, completion)
        except AdapterParseError:
            rewritten = rewrite_lists(signature, completion)
            if rewritten is None:
                raise
            try:
                return _chat_parse(self, signature, rewritten)
            except AdapterParseError:
                pass
            raise


# DSPy's StreamListener looks the adapter up by class name ("ChatAdapter", "JSONAdapter",
# "XMLAdapter") and refuses any other, so streaming (dspy.streamify, prog.astream, serve's SSE)
# would stop working with a subclass of another name; its streaming format is ChatAdapter's.
ListTolerantChatAdapter.__name__ = "ChatAdapter"

#: ChatAdapter's own parse, without DSPy's callback wrapper: this class's parse is wrapped
#: already (DSPy wraps every Adapter subclass's parse), and the wrapped one would report the
#: first, failed attempt to the tracing as a parse failure although this parse succeeds
_chat_parse = getattr(dspy.ChatAdapter.parse, "__wrapped__", dspy.ChatAdapter.parse)
