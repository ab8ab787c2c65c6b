"""Dead letters' reasons as a message code and figures, read back from their stored English.

Each stored reason is matched against the messages of its own reason code (an ``undecodable``
letter only against ``undecodable``'s): a message whose figures, read back, say the stored
text again word for word becomes that code with those figures. Anything else (a reason cut at
4000 characters, a wording from before) is kept word for word as a ``legacy_text`` reason.
"""

import re
import string

from django.db import migrations, models

from inventory.wire.schema import MESSAGES, REASON_PREFIX, BatchRejected

_KINDS = {text: key for key, text in MESSAGES.items() if key.startswith("kind.")}
_INTEGER = re.compile(r"-?\d+")


def _pattern(template):
    """The template as a regular expression, a named group for each figure."""
    parts, specs = [], {}
    for literal, name, spec, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if name is not None:
            parts.append(f"(?P<{name}>.*?)")
            specs[name] = spec
    return re.compile("".join(parts), re.DOTALL), specs


def _figure(name, text, spec):
    if name == "kind":
        key = _KINDS.get(text)
        return {"code": REASON_PREFIX + key, "params": {}} if key else None
    if _INTEGER.fullmatch(text):
        return int(text)
    if spec == "g":
        try:
            return float(text)
        except ValueError:
            return None
    return text


def _read_back(code, text):
    for key in MESSAGES:
        if not key.startswith(f"{code}."):
            continue
        pattern, specs = _pattern(MESSAGES[key])
        found = pattern.fullmatch(text)
        if not found:
            continue
        params = {
            name: _figure(name, value, specs[name]) for name, value in found.groupdict().items()
        }
        if None in params.values():
            continue
        rejected = BatchRejected(code, key.removeprefix(f"{code}."), **params)
        if rejected.message == text:
            return rejected.reason()
    return {"code": "legacy_text", "params": {"text": text}}


def codes_for_stored_reasons(apps, schema_editor):
    DeadLetter = apps.get_model("inventory", "DeadLetter")
    changed = []
    for letter in DeadLetter.objects.only("pk", "reason_code", "reason").iterator(chunk_size=2000):
        letter.reason_message = _read_back(letter.reason_code, letter.reason)
        changed.append(letter)
        if len(changed) >= 2000:
            DeadLetter.objects.bulk_update(changed, ["reason_message"])
            changed = []
    DeadLetter.objects.bulk_update(changed, ["reason_message"])


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0020_engine_rollup_p50"),
    ]

    operations = [
        migrations.AddField(
            model_name="deadletter",
            name="reason_message",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="The reason as a message code and figures (inventory.analytics.reasons), read in "
                "the reader's language.",
            ),
        ),
        migrations.AlterField(
            model_name="deadletter",
            name="reason",
            field=models.TextField(
                help_text="In English, for the audit trail and the command line."
            ),
        ),
        migrations.RunPython(codes_for_stored_reasons, migrations.RunPython.noop),
    ]
