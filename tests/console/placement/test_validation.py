"""Bad input is rejected with errors that name the field."""

from __future__ import annotations

import copy

import pytest

from console.placement import FieldError, PlacementInputError, solve, validate_problem


def base_request() -> dict:
    return {
        "about": "anything goes here",
        "gpus": [
            {"id": "h1:0", "host": "h1", "type": "A100-SXM4-80GB", "memory_mib": 81920},
            {"id": "h1:1", "host": "h1", "type": "A100-SXM4-80GB", "memory_mib": 81920},
            {"id": "h2:0", "host": "h2", "type": "H100-SXM5-80GB", "memory_mib": 81559},
        ],
        "models": [
            {"name": "m0", "memory_mib": 1024},
            {"name": "m1", "memory_mib": 2048, "gpus": 2},
            {"name": "m2", "memory_mib": 4096, "isolation": "mps", "priority": 0},
        ],
        "policy": {"method": "greedy", "time_limit_s": 1, "headroom_mib": 0, "whole_card": False},
    }


def errors_of(request: object) -> dict[str, str]:
    with pytest.raises(PlacementInputError) as caught:
        validate_problem(request)
    assert isinstance(caught.value, ValueError)
    assert all(isinstance(e, FieldError) for e in caught.value.errors)
    return {e.field: e.message for e in caught.value.errors}


def with_change(path: list, value: object) -> dict:
    request = copy.deepcopy(base_request())
    target = request
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return request


def test_the_base_request_is_valid_and_about_is_ignored():
    problem = validate_problem(base_request())
    assert [m.name for m in problem.models] == ["m0", "m1", "m2"]
    assert problem.models[0].gpus == 1 and problem.models[0].isolation == "any"


@pytest.mark.parametrize(
    ("path", "value", "field", "fragment"),
    [
        (["models", 2, "memory_mib"], -1, "models[2].memory_mib", "must be >= 0"),
        (["gpus", 1, "used_mib"], -5, "gpus[1].used_mib", "must be >= 0"),
        (["gpus", 1, "memory_mib"], 0, "gpus[1].memory_mib", "must be >= 1"),
        (["policy", "headroom_mib"], -1, "policy.headroom_mib", "must be >= 0"),
        (["models", 0, "memory_mib"], "1 GiB", "models[0].memory_mib", "integer"),
        (["models", 0, "memory_mib"], True, "models[0].memory_mib", "integer"),
        (["models", 0, "memory_mib"], 10.5, "models[0].memory_mib", "integer"),
        (["models", 0, "gpus"], 0, "models[0].gpus", "must be >= 1"),
        (["models", 0, "exclusive"], "yes", "models[0].exclusive", "true or false"),
        (["models", 0, "isolation"], "vm", "models[0].isolation", "one of"),
        (["models", 0, "name"], "", "models[0].name", "non-empty string"),
        (["policy", "method"], "fast", "policy.method", "one of"),
        (["policy", "time_limit_s"], 0, "policy.time_limit_s", "> 0"),
        (["policy", "time_limit_s"], "5", "policy.time_limit_s", "number"),
        (["gpus", 0, "models"], "m9", "gpus[0].models", "list"),
        (["gpus", 0, "used_mib"], 90000, "gpus[0].used_mib", "more than the card"),
        (["gpus"], [], "gpus", "at least one card"),
        (["models"], {"m0": 1}, "models", "list"),
        (["policy"], None, "policy", "object"),
    ],
)
def test_bad_values_name_the_field(path, value, field, fragment):
    errors = errors_of(with_change(path, value))
    assert field in errors, errors
    assert fragment in errors[field]


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ([], "colour"),
        (["models", 1], "models[1].colour"),
        (["gpus", 2], "gpus[2].colour"),
        (["policy"], "policy.colour"),
    ],
)
def test_unknown_keys_are_rejected(path, field):
    request = base_request()
    target = request
    for step in path:
        target = target[step]
    target["colour"] = "blue"
    errors = errors_of(request)
    assert "unknown key" in errors[field]


def test_missing_required_keys_are_named():
    request = base_request()
    del request["gpus"][0]["host"]
    del request["models"][1]["memory_mib"]
    errors = errors_of(request)
    assert errors["gpus[0].host"] == "is required"
    assert errors["models[1].memory_mib"] == "is required"


def test_duplicate_ids_and_names_point_at_the_first_one():
    request = base_request()
    request["gpus"][2]["id"] = "h1:0"
    request["models"][2]["name"] = "m0"
    errors = errors_of(request)
    assert "duplicate id 'h1:0'" in errors["gpus[2].id"] and "gpus[0]" in errors["gpus[2].id"]
    assert "duplicate name 'm0'" in errors["models[2].name"]


def test_a_model_larger_than_any_card_is_an_error_with_the_largest_card():
    request = with_change(["models", 1, "memory_mib"], 81921)
    message = errors_of(request)["models[1].memory_mib"]
    assert "81921" in message and "81920" in message


def test_more_gpus_than_any_host_has_is_an_error():
    request = with_change(["models", 1, "gpus"], 3)
    message = errors_of(request)["models[1].gpus"]
    assert "3" in message and "h1" in message and "has 2" in message


def test_all_errors_are_reported_together():
    request = base_request()
    request["models"][0]["memory_mib"] = -1
    request["models"][2]["isolation"] = "vm"
    request["policy"]["method"] = "fast"
    with pytest.raises(PlacementInputError) as caught:
        solve(request)
    fields = [item["field"] for item in caught.value.as_dicts()]
    assert fields.count("models[0].memory_mib") == 1
    assert {"models[2].isolation", "policy.method"} <= set(fields)
    assert "models[0].memory_mib: must be >= 0" in str(caught.value)


def test_mig_on_an_unknown_card_type_is_an_error():
    request = base_request()
    request["gpus"][2].update(type="Tesla T4", mig=True)
    assert "no MIG profile catalogue" in errors_of(request)["gpus[2].type"]


def test_mig_model_must_use_one_card():
    request = with_change(["models", 1, "isolation"], "mig")
    assert "must be 1" in errors_of(request)["models[1].gpus"]


@pytest.mark.parametrize(
    ("slices", "field", "fragment"),
    [
        ([{"profile": "3g.40gb", "start": 2}], "gpus[0].mig_slices", "cannot start at slot 2"),
        (
            [{"profile": "3g.40gb", "start": 4}, {"profile": "2g.20gb", "start": 4}],
            "gpus[0].mig_slices",
            "overlaps",
        ),
        ([{"profile": "3g.71gb", "start": 0}], "gpus[0].mig_slices[0].profile", "not a A100-80GB"),
        ([{"profile": "1g.10gb", "begin": 0}], "gpus[0].mig_slices[0].begin", "unknown key"),
        (
            [{"profile": "1g.10gb+me", "start": 0}, {"profile": "1g.10gb+me", "start": 1}],
            "gpus[0].mig_slices",
            "only one +me",
        ),
    ],
)
def test_bad_mig_slices_are_rejected(slices, field, fragment):
    request = base_request()
    request["gpus"][0].update(mig=True, mig_slices=slices)
    errors = errors_of(request)
    assert fragment in errors[field], errors


def test_mig_slices_need_a_mig_card_and_tenants_need_slices():
    request = base_request()
    request["gpus"][0]["mig_slices"] = [{"profile": "1g.10gb", "start": 0}]
    request["gpus"][1].update(mig=True, models=["old"])
    errors = errors_of(request)
    assert "mig: true" in errors["gpus[0].mig_slices"]
    assert "must list the slices" in errors["gpus[1].mig_slices"]


def test_compute_instance_profile_names_are_read_as_their_gpu_instance():
    request = base_request()
    request["gpus"][0].update(
        mig=True,
        models=["old"],
        mig_slices=[{"profile": "MIG 1c.3g.40gb", "start": 4, "model": "old"}],
    )
    card = validate_problem(request).cards[0]
    assert [(s.profile.name, s.start, s.model) for s in card.mig_slices] == [("3g.40gb", 4, "old")]


def test_top_level_must_be_an_object():
    assert "" in errors_of(["not", "an", "object"])
