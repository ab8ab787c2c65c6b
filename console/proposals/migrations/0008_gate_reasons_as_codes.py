"""Gate results stored before the gates spoke in codes, moved onto codes.

The load-test gate kept its checks as codes in ``numbers["reason_codes"]`` and the
engine-settings gate in ``evidence["reasons"]`` (and its pass in ``evidence["summary"]``):
those become the coded reasons and summary, figures and all. A stored sentence that is a
catalogue message without figures ("There is no KV reservation.") becomes its code; every
other one is kept word for word as a ``legacy_text`` reason: the figures in it were rounded
for reading and cannot be read back exactly, so no pattern is guessed at.
"""

from django.db import migrations

# What the two gates' parameters were called before, where they differ now.
_LOAD_TEST_BYTES = {"declared", "measured", "peak", "bound"}  # kept as *_bytes beside them
_ENGINE_JOINED = {"claims", "names"}  # were ", "-joined text, are lists now


def _legacy(text):
    return {"code": "legacy_text", "params": {"text": text}}


def _sentence(text, fixed):
    code = fixed.get(text)
    return {"code": code, "params": {}} if code else _legacy(text)


def _fixed_sentences():
    """English sentence -> code, of the gates' messages that carry no figures."""
    from console.core import reason_text  # imports, and so registers, every catalogue
    from inventory.analytics.reasons import known_codes

    fixed = {}
    for code in known_codes():
        if not code.startswith("gate."):
            continue
        try:
            fixed[reason_text.render_in({"code": code, "params": {}}, "en")] = code
        except (KeyError, IndexError):  # it has figures
            continue
    return fixed


def _load_test(code):
    params = {k: v for k, v in code["params"].items() if k not in _LOAD_TEST_BYTES}
    return {"code": f"gate.load_test.{code['code']}", "params": params}


def _engine(code):
    params = dict(code["params"])
    for key in _ENGINE_JOINED & params.keys():
        if isinstance(params[key], str):
            params[key] = params[key].split(", ")
    if code["code"] == "fraction_unknown":
        # The setting was the engine's flag text; the catalogue now names it by engine.
        params["setting"] = _legacy(params["setting"])
    if code["code"] == "fractions_exceed":
        params["claims"] = [_legacy(claim) for claim in params["claims"]]
    return {"code": f"gate.engine_settings.{code['code']}", "params": params}


def codes_for_stored_sentences(apps, schema_editor):
    GateResult = apps.get_model("proposals", "GateResult")
    fixed = _fixed_sentences()
    for result in GateResult.objects.iterator(chunk_size=500):
        coded = None
        if result.gate == "load_test" and "reason_codes" in result.numbers:
            coded = [_load_test(code) for code in result.numbers.pop("reason_codes")]
        elif result.gate == "engine_settings" and "reasons" in result.evidence:
            coded = [_engine(code) for code in result.evidence.pop("reasons")]
            verdict = result.evidence.pop("summary", None)
            if verdict and not result.summary_reason:
                result.summary_reason = {
                    "code": f"gate.engine_settings.{verdict['code']}",
                    "params": verdict["params"],
                }
        if coded is None:
            coded = [_sentence(r, fixed) if isinstance(r, str) else r for r in result.reasons]
        result.reasons = coded
        if not result.summary_reason:
            # A failure's summary is its first reason (the load test's adds its first bound).
            same = result.reasons and result.summary == _english_of(result.reasons[0])
            result.summary_reason = result.reasons[0] if same else _sentence(result.summary, fixed)
        result.save(update_fields=["reasons", "summary_reason", "numbers", "evidence"])


def _english_of(reason):
    from console.core.reason_text import render_in  # imports, and so registers, every catalogue

    return render_in(reason, "en")


class Migration(migrations.Migration):
    dependencies = [("proposals", "0007_gate_result_summary_reason")]

    operations = [
        migrations.RunPython(codes_for_stored_sentences, migrations.RunPython.noop),
    ]
