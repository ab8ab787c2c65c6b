"""The solver's two doors: `manage.py place` and POST /api/placement/."""

import json

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from tests.console.placement.support import SCENARIOS


def test_the_command_places_the_three_a100_scenario(tmp_path):
    out = tmp_path / "answer.json"
    call_command("place", str(SCENARIOS / "seed-3xa100-5models.json"), "--output", str(out))
    answer = json.loads(out.read_text())
    assert answer["cards_used"] == 2
    assert answer["unplaced"] == []
    assert sorted(len(card["models"]) for card in answer["cards"]) == [0, 2, 3]


def test_the_command_names_every_bad_field_and_fails(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"gpus": [], "models": [{"name": "x", "memory_mib": -1}],
                               "extra": True}))  # fmt: skip
    with pytest.raises(CommandError) as error:
        call_command("place", str(bad))
    message = str(error.value)
    assert "extra: unknown key" in message
    assert "models[0].memory_mib: must be >= 0" in message


def test_the_command_refuses_a_file_that_is_not_json(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CommandError, match="is not JSON"):
        call_command("place", str(bad))


@pytest.fixture
def api(personas):
    client = APIClient()
    client.force_authenticate(personas["approver"])
    return client


@pytest.mark.django_db
def test_the_api_places_with_whole_card_and_explains_the_unplaced(api):
    request = json.loads((SCENARIOS / "seed-3xa100-5models.json").read_text())
    request["policy"]["whole_card"] = True
    answer = api.post("/api/placement/", request, format="json").json()
    assert answer["unplaced"]
    assert all("MiB" in entry["reason"] for entry in answer["unplaced"])


@pytest.mark.django_db
def test_the_api_answers_400_with_one_error_per_field(api):
    response = api.post(
        "/api/placement/",
        {"gpus": [{"id": "a", "host": "h", "memory_mib": 100},
                  {"id": "a", "host": "h", "memory_mib": 100}],
         "models": [{"name": "m", "memory_mib": -5}]},
        format="json",
    )  # fmt: skip
    assert response.status_code == 400
    fields = {error["field"] for error in response.json()["errors"]}
    assert "gpus[1].id" in fields
    assert "models[0].memory_mib" in fields


@pytest.mark.django_db
def test_the_api_caps_the_time_limit(api, settings):
    settings.PLACEMENT_API_MAX_TIME_S = 2
    request = json.loads((SCENARIOS / "seed-3xa100-5models.json").read_text())
    request["policy"]["time_limit_s"] = 60
    response = api.post("/api/placement/", request, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "policy.time_limit_s"
