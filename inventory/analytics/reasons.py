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
separator ``"; "`` (``{x:comma}``: with ``", "``). A message made with ``ngettext_lazy``
chooses its form by the ``count`` parameter. Format specs: ``{x:gib}`` bytes as GiB
(format_gib of inventory.analytics.units; units kept in every language), ``{x:mib}`` an
integer of MiB, ``{x:ms}`` seconds as milliseconds, ``{x:time}`` a moment stored as ISO 8601
with its offset, shown in the reader's zone (``zone``) and naming it. ``render(reason,
translation)`` takes the translation (django.utils.translation, or ENGLISH) so this module
stays free of Django; pages use the ``render_reason`` filter (console/core/templatetags/reasons.py),
code outside a request ``render_in(reason, language)`` (console/core/reason_text.py).
"""

from __future__ import annotations

import datetime as dt
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from inventory.analytics.units import format_gib, format_ms


class Translation(Protocol):
    """What render needs of a translation: django.utils.translation itself fits."""

    def gettext(self, message: str) -> str: ...

    def ngettext(self, singular: str, plural: str, number: int) -> str: ...


@dataclass(frozen=True)
class Plural:
    """A message whose wording follows the reason's ``count`` parameter."""

    singular: str
    plural: str


_MESSAGES: dict[str, str | Plural] = {}


def gettext_noop(message: str) -> str:
    """Marks a message for makemessages (it looks for this name); translated at render."""
    return message


def ngettext_lazy(singular: str, plural: str) -> Plural:
    """A plural message, named so that makemessages extracts both forms; chosen at render."""
    return Plural(singular, plural)


# How lists of reasons are joined: ``{x}`` with "; ", ``{x:comma}`` with ", ".
_SEPARATOR = gettext_noop("; ")
_COMMA = gettext_noop(", ")


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


def as_stored(reason: Reason | str) -> dict | str:
    """What a JSON field keeps of a reason: its code and figures, or old-style text as it is."""
    return reason.to_json() if isinstance(reason, Reason) else reason


def register(messages: Mapping[str, str | Plural]) -> Mapping[str, str | Plural]:
    for code, template in messages.items():
        if _MESSAGES.get(code, template) != template:
            raise ValueError(f"reason code {code!r} registered twice with different messages")
        _MESSAGES[code] = template
    return messages


def known_codes() -> frozenset[str]:
    return frozenset(_MESSAGES)


class _English:
    """The msgids themselves: what a reason says where no language is active."""

    @staticmethod
    def gettext(message: str) -> str:
        return message

    @staticmethod
    def ngettext(singular: str, plural: str, number: int) -> str:
        return singular if number == 1 else plural


ENGLISH = _English()

# A row stored as a sentence before its owner moved onto codes, whose pattern a migration
# could not read back into figures: shown as it was, in English.
register({"legacy_text": gettext_noop("{text}")})


def legacy(text: str) -> Reason:
    return Reason("legacy_text", {"text": text})


class _Formatter(string.Formatter):
    def __init__(self, translation: Translation, zone: dt.tzinfo | None):
        self.translation = translation
        self.zone = zone

    def format_field(self, value, format_spec: str) -> str:
        if format_spec == "time":
            return _moment(value, self.zone)
        if format_spec == "gib":
            return "?" if value is None else format_gib(value)
        if format_spec == "ms":
            return "?" if value is None else format_ms(value)
        if format_spec == "mib":
            return "?" if value is None else f"{int(value)} MiB"
        if format_spec == "comma":
            return self.translation.gettext(_COMMA).join(str(self.render_value(v)) for v in value)
        return super().format_field(self.render_value(value), format_spec)

    def render_value(self, value):
        if isinstance(value, Reason) or (isinstance(value, Mapping) and "code" in value):
            return render(value, self.translation, self.zone)
        if isinstance(value, list | tuple):
            separator = self.translation.gettext(_SEPARATOR)
            return separator.join(str(self.render_value(v)) for v in value)
        return value


def _moment(value, zone: dt.tzinfo | None) -> str:
    """A stored moment in the reader's zone, named; one stored without an offset (before times
    were kept with theirs) was written in UTC. What does not read as a moment shows as it is."""
    try:
        moment = dt.datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    moment = moment.astimezone(zone or dt.UTC)
    return f"{moment:%Y-%m-%d %H:%M:%S} {moment.tzname()}"


def render(
    reason: Reason | Mapping | str | None,
    translation: Translation = ENGLISH,
    zone: dt.tzinfo | None = None,
) -> str:
    """The reason as a sentence; a plain string (a row stored before codes) passes through.
    Moments (``{x:time}``) show in `zone`, UTC where none is given."""
    if reason is None or reason == {}:
        return ""
    if isinstance(reason, str):
        return reason
    if not isinstance(reason, Reason):
        reason = Reason.from_json(reason)
    template = _MESSAGES.get(reason.code)
    if template is None:  # a code from a newer version: still say something useful
        return f"{reason.code} {dict(reason.params)}"
    if isinstance(template, Plural):
        text = translation.ngettext(template.singular, template.plural, reason.params["count"])
    else:
        text = translation.gettext(template)
    return _Formatter(translation, zone).vformat(text, (), dict(reason.params))
