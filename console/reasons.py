"""User-facing reasons as a code and parameters, rendered in the reader's language.

A record keeps ``Reason("oom.true_peak", {"demand": 81604378624, ...})``, never the sentence,
so the same row reads in English or Chinese. The English message template of each code is
its gettext msgid; domain modules (pure, no Django) declare theirs with ``gettext_noop`` so
that ``makemessages`` finds them, and register them here:

    MESSAGES = register({
        "oom.true_peak": gettext_noop("processes allocated {demand:gib} of {usable:gib} usable"),
    })

Templates are ``str.format`` strings. Parameters are JSON values, another reason (a dict
with ``code`` and ``params``) or a list of them; lists render joined with the translated
separator ``"; "``. Format specs: ``{x:gib}`` bytes as GiB (format_gib of
inventory.analytics.units; units kept in every language), ``{x:mib}`` an integer of MiB.
``render(reason, translate)`` takes the translation function (``gettext``) so this module
stays free of Django; pages use the ``render_reason`` filter (console/templatetags/reasons.py),
code outside a request ``render_in(reason, language)`` (console/reason_text.py).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from inventory.analytics.units import format_gib

Translate = Callable[[str], str]

_MESSAGES: dict[str, str] = {}
SEPARATOR = "; "


def gettext_noop(message: str) -> str:
    """Marks a message for makemessages (it looks for this name); translated at render."""
    return message


# The separator lists of reasons are joined with; registered so that it gets a translation.
_SEPARATOR_MSGID = gettext_noop("; ")


@dataclass(frozen=True)
class Reason:
    code: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"code": self.code, "params": {k: _to_json(v) for k, v in self.params.items()}}

    @classmethod
    def from_json(cls, data: Mapping) -> Reason:
        return cls(data["code"], {k: _from_json(v) for k, v in (data.get("params") or {}).items()})


def _to_json(value):
    if isinstance(value, Reason):
        return value.to_json()
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    return value


def _from_json(value):
    if isinstance(value, dict) and "code" in value:
        return Reason.from_json(value)
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def register(messages: Mapping[str, str]) -> Mapping[str, str]:
    for code, template in messages.items():
        if _MESSAGES.get(code, template) != template:
            raise ValueError(f"reason code {code!r} registered twice with different messages")
        _MESSAGES[code] = template
    return messages


def message(code: str) -> str:
    return _MESSAGES[code]


def known_codes() -> frozenset[str]:
    return frozenset(_MESSAGES)


def _identity(text: str) -> str:
    return text


class _Formatter(string.Formatter):
    def __init__(self, translate: Translate):
        self.translate = translate

    def format_field(self, value, format_spec: str) -> str:
        if format_spec == "gib":
            return "?" if value is None else format_gib(value)
        if format_spec == "mib":
            return "?" if value is None else f"{int(value)} MiB"
        return super().format_field(self.render_value(value), format_spec)

    def render_value(self, value):
        if isinstance(value, Reason | Mapping) and "code" in _as_json(value):
            return render(value, self.translate)
        if isinstance(value, list | tuple):
            separator = self.translate(_SEPARATOR_MSGID)
            return separator.join(str(self.render_value(v)) for v in value)
        return value


def _as_json(value) -> Mapping:
    return value.to_json() if isinstance(value, Reason) else value


def render(reason: Reason | Mapping | str | None, translate: Translate = _identity) -> str:
    """The reason as a sentence; a plain string (a row stored before codes) passes through."""
    if reason is None or reason == {}:
        return ""
    if isinstance(reason, str):
        return reason
    if not isinstance(reason, Reason):
        reason = Reason.from_json(reason)
    template = _MESSAGES.get(reason.code)
    if template is None:  # a code from a newer version: still say something useful
        return f"{reason.code} {dict(reason.params)}"
    return _Formatter(translate).vformat(translate(template), (), dict(reason.params))
