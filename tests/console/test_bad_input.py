"""The hostile inputs of issue 11 each answer 4xx with a reason, never a 5xx."""

import json

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from console.placement.schema import MAX_MEMORY_MIB
from tests.console.proposals.support import create_proposal
from tests.examples import examples
from tests.factories import GpuFactory, ServedModelFactory
from tests.tokens import token_for

pytestmark = pytest.mark.django_db

PLACEMENT = {
    "gpus": [{"id": "h1:0", "host": "h1", "memory_mib": 81920}],
    "models": [{"name": "m1", "memory_mib": 46080}],
    "policy": {"method": "exact", "time_limit_s": 2},
}


@pytest.fixture
def api(personas):
    client = APIClient()
    token = token_for(personas["oncall"])
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


@pytest.fixture
def gpu():
    return GpuFactory(index=0)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def post_json(api, path: str, text: str):
    return api.generic("POST", path, text, content_type="application/json")


# NUL bytes: one middleware answers them before any view or query.


@pytest.mark.parametrize(
    "path",
    [
        "/?q=a%00b",
        "/?sort=%00&status=up",
        "/hosts/{host}/charts/?window=24h%00",
        "/oom/?host=%00&weeks=4",
        "/audit/?actor=x%00",
        "/proposals/?q=%00",
        "/runbooks/?q=%00",
        "/hosts/a%00b/",
    ],
)
def test_nul_in_a_page_parameter_or_path_answers_400(client_as, gpu, path):
    response = client_as("oncall").get(path.format(host=gpu.host.name))
    assert response.status_code == 400
    assert b"NUL characters are not allowed" in response.content


@pytest.mark.parametrize(
    "path",
    [
        "/api/hosts/?q=%00",
        "/api/hosts/{host}/samples/?gpu=0&from=%00",
        "/api/hosts/{host}%00/ledger/",
        "/api/oom/?model=%00",
        "/api/audit/?action=%00",
        "/api/proposals/?host=%00",
        "/api/runbooks/?tag=%00",
    ],
)
def test_nul_in_an_api_parameter_answers_400_in_json(api, gpu, path):
    response = api.get(path.format(host=gpu.host.name))
    assert response.status_code == 400
    assert "NUL characters are not allowed" in response.json()["detail"]


# Pages read query parameters too: any text in any of them answers a page or a 4xx.

PAGE_PARAMETERS = {
    "/": ["sort", "q", "status", "label", "problems", "partial", "page"],
    "/hosts/{host}/": ["at"],
    "/hosts/{host}/charts/": ["window"],
    "/models/": ["page"],
    "/oom/": ["weeks", "host", "model", "cause", "page"],
    "/oom/export.csv": ["weeks", "host", "model", "cause"],
    "/audit/": ["action", "actor", "host", "page"],
    "/proposals/": ["q", "state", "host", "author", "page"],
    "/proposals/new/": ["host"],
    "/runbooks/": ["q", "tag", "page"],
    "/runbooks/new/": ["host", "model"],
    "/ingest/dead-letters/": ["status", "page"],
}


@pytest.mark.parametrize("path", PAGE_PARAMETERS)
@given(data=st.data())
@settings(
    max_examples=examples(15),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_any_text_in_a_page_parameter_answers_below_500(client_as, gpu, path, data):
    names = PAGE_PARAMETERS[path]
    query = data.draw(st.dictionaries(st.sampled_from(names), st.text(max_size=40), max_size=3))
    response = client_as("oncall").get(path.format(host=gpu.host.name), query)
    assert response.status_code < 500, (path, query)


@pytest.mark.parametrize("digits", ["²", "①", "٣"])
def test_a_unicode_digit_where_an_id_may_stand_is_no_server_error(client_as, gpu, digits):
    # str.isdigit() holds for "²" and "①", which int() refuses: the pages test isdecimal().
    for path, name in [("/proposals/new/", "host"), ("/runbooks/new/", "host")]:
        assert client_as("oncall").get(path, {name: digits}).status_code < 500, (path, digits)


def test_nul_in_a_form_field_a_token_or_a_cookie_answers_400(client, api):
    login = client.post("/accounts/login/", {"username": "on\x00call", "password": "x"})
    assert login.status_code == 400
    assert b"the form field 'username'" in login.content
    token = APIClient().get("/api/hosts/", HTTP_AUTHORIZATION="Token abc\x00def")
    assert token.status_code == 400
    assert "the header Authorization" in token.json()["detail"]
    cookie = client.get("/api/hosts/", HTTP_COOKIE="sessionid=abc\x00def")
    assert cookie.status_code == 400
    assert "the header Cookie" in cookie.json()["detail"]


def test_nul_in_a_json_string_answers_400(api, gpu):
    response = post_json(api, "/api/proposals/", json.dumps({"served_model": "a\x00b"}))
    assert response.status_code == 400
    assert "NUL character in a string (at body.served_model)" in response.json()["detail"]


def test_a_lone_surrogate_in_json_answers_400(api):
    response = post_json(api, "/api/proposals/", '{"served_model": "\\ud800"}')
    assert response.status_code == 400
    assert "surrogate" in response.json()["detail"]


# Bounds on from, to, step and at.


@pytest.mark.parametrize(
    ("query", "field", "reason"),
    [
        ({"from": "0001-01-01"}, "from", "must be from 2000-01-01 to before 2100-01-01"),
        ({"to": "0001-01-01T00:30:00Z"}, "to", "must be from 2000-01-01"),
        ({"to": "9999-12-31T23:59:59Z"}, "to", "not 9999-12-31"),
        ({"step": "1e30"}, "step", "A valid integer is required."),
        ({"step": 10**30}, "step", "less than or equal to 86400"),
        ({"step": -5}, "step", "greater than or equal to 1"),
        ({"gpu": 10**30}, "gpu", "less than or equal to 255"),
        (
            {"from": "2001-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z", "step": 86400},
            "from",
            "at most 730 days before to",
        ),
    ],
)
def test_samples_refuse_moments_and_steps_out_of_range(api, gpu, query, field, reason):
    response = api.get(f"/api/hosts/{gpu.host.name}/samples/", query)
    assert response.status_code == 400
    assert reason in str(response.json()[field])


def test_the_ledger_refuses_a_moment_before_2000(api, gpu):
    response = api.get(f"/api/hosts/{gpu.host.name}/ledger/", {"at": "0001-01-01"})
    assert response.status_code == 400
    assert "must be from 2000-01-01" in str(response.json()["at"])


# JSON depth and integer size, before any view or solver sees the body.


@pytest.mark.parametrize("path", ["/api/placement/", "/api/proposals/"])
def test_json_nested_5000_deep_answers_400(api, path):
    response = post_json(api, path, nested(5000))
    assert response.status_code == 400
    assert "nested deeper than 32 levels" in response.json()["detail"]


def test_json_nested_past_the_bound_names_where(api):
    response = post_json(api, "/api/placement/", json.dumps({"about": json.loads(nested(40))}))
    assert response.status_code == 400
    assert "nested deeper than 32 levels (at body.about[0]" in response.json()["detail"]


@pytest.mark.parametrize("path", ["/api/placement/", "/api/proposals/"])
def test_a_4000_digit_integer_answers_400(api, path):
    response = post_json(api, path, '{"gpus": [' + "9" * 4000 + "]}")
    assert response.status_code == 400
    assert "a number beyond ±2^53" in response.json()["detail"]


def test_an_integer_past_2_to_the_53_names_its_place(api):
    body = {**PLACEMENT, "gpus": [{**PLACEMENT["gpus"][0], "memory_mib": 2**60}]}
    response = post_json(api, "/api/placement/", json.dumps(body))
    assert response.status_code == 400
    assert response.json()["detail"] == (
        "JSON parse error - a number beyond ±2^53 (at body.gpus[0].memory_mib)"
    )


def test_placement_memory_past_the_schema_maximum_is_a_field_error(api):
    body = {**PLACEMENT, "gpus": [{**PLACEMENT["gpus"][0], "memory_mib": 2**50}]}
    response = post_json(api, "/api/placement/", json.dumps(body))
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"field": "gpus[0].memory_mib", "message": f"must be <= {MAX_MEMORY_MIB}"}
    ]


def test_placement_reads_json_only(api):
    # The NUL check has read the multipart body already: the solver sees no fields at all.
    response = api.post("/api/placement/", {"gpus": "x"}, format="multipart")
    assert response.status_code == 400
    assert {"field": "gpus", "message": "is required"} in response.json()["errors"]
    text = api.post("/api/placement/", "gpus", content_type="text/plain")
    assert text.status_code == 415


def test_a_proposal_form_body_with_a_huge_integer_answers_400(api, gpu):
    model = ServedModelFactory()
    body = {
        "served_model": model.name,
        "host": gpu.host.name,
        "cards": [0],
        "isolation_mode": "gpu_group",
        "kv_reservation_bytes": str(10**25),
        "kv_tokens_per_request": str(10**12),
        "rationale": "fuzz",
    }
    response = api.post("/api/proposals/", body, format="multipart")
    assert response.status_code == 400
    assert "less than or equal to 9007199254740992" in str(response.json()["kv_reservation_bytes"])
    assert "less than or equal to 2147483647" in str(response.json()["kv_tokens_per_request"])


# One solve per user at a time, whatever the method; a size limit and a time limit on each.


@pytest.mark.parametrize("method", ["greedy", "exact", "auto"])
def test_a_second_solve_of_the_same_user_answers_429(api, personas, method):
    slot = f"placement-solve:{personas['oncall'].pk}"
    body = json.dumps({**PLACEMENT, "policy": {"method": method}})
    assert cache.add(slot, "running")  # the first solve, still running
    try:
        busy = post_json(api, "/api/placement/", body)
        assert busy.status_code == 429
        assert "A placement solve of yours is still running" in busy.json()["detail"]
        assert int(busy["Retry-After"]) >= 1
    finally:
        cache.delete(slot)
    assert post_json(api, "/api/placement/", body).status_code == 200
    assert cache.get(slot) is None  # released once the solve is done


@pytest.mark.parametrize("method", ["greedy", "exact", "auto"])
def test_a_placement_over_the_size_limit_answers_400_naming_it(api, settings, method):
    settings.PLACEMENT_API_MAX_PAIRS = 100
    body = {
        "gpus": [{"id": f"h:{i}", "host": "h", "memory_mib": 1024} for i in range(11)],
        "models": [{"name": f"m{i}", "memory_mib": 1} for i in range(10)],
        "policy": {"method": method},
    }
    response = post_json(api, "/api/placement/", json.dumps(body))
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["field"] == "gpus"
    assert "11 cards x 10 models" in error["message"]
    assert "PLACEMENT_API_MAX_PAIRS" in error["message"]
    body["gpus"].pop()
    assert post_json(api, "/api/placement/", json.dumps(body)).status_code == 200


def test_a_greedy_pass_past_the_time_limit_answers_400_naming_it(api):
    body = {
        "gpus": [{"id": f"h:{i}", "host": "h", "memory_mib": 1024} for i in range(400)],
        "models": [{"name": f"m{i}", "memory_mib": 2} for i in range(400)],
        "policy": {"method": "greedy", "time_limit_s": 0.001},
    }
    response = post_json(api, "/api/placement/", json.dumps(body))
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["field"] == "policy.time_limit_s"
    assert "no answer within 0.001 s for 400 cards x 400 models" in error["message"]


def test_a_placement_body_over_the_byte_limit_answers_400_naming_it(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = {**PLACEMENT, "about": "x" * 1000}
    response = post_json(api, "/api/placement/", json.dumps(body))
    assert response.status_code == 400
    assert "larger than 1000 bytes" in response.json()["detail"]


# Load-test uploads: every malformed file answers the form with the line at fault.

CSV_HEADER = b"model,card,p99_latency_ms,card_peak_gib\n"


@pytest.mark.parametrize(
    ("name", "content", "error"),
    [
        ("t.csv", CSV_HEADER + b"m,c,\xff,1\n", "t.csv line 2: not UTF-8 text"),
        ("t.csv", CSV_HEADER + b"m,c,1,2\nm,c\x00,1,2\n", "t.csv line 3: NUL characters"),
        ("t.csv", CSV_HEADER + b"m,c,1\n", "t.csv line 2: card_peak_gib '' is not a number"),
        (
            "t.csv",
            CSV_HEADER + b"m,c,1," + b"9" * 4000 + b"\n",
            "t.csv line 2: card_peak_gib must be a number from 0 to 2^53",
        ),
        ("t.csv", CSV_HEADER + b'm,c,1,"' + b"x" * 200_000 + b'"\n', "field larger than"),
        ("r.json", b'{"model_id": "m",\n  "completed": x}', "line 2 column 16"),
        ("r.json", nested(5000).encode(), "r.json: not a vLLM result (nested too deep)"),
        (
            "r.json",
            b'{"model_id": "m", "completed": 1' + b"0" * 4000 + b"}",
            "'completed' is a huge integer, not a finite number within ±2^53",
        ),
        (
            "r.json",
            b'{"model_id": "m", "completed": 1, "duration": 1e300}',
            "'duration' is 1e+300",
        ),
        ("r.json", b'{"model_id": "m\\u0000", "completed": 1}', "NUL characters"),
    ],
)
def test_a_malformed_load_test_answers_the_form_with_the_line(
    client_as, personas, name, content, error
):
    proposal = create_proposal(personas["oncall"])
    response = client_as("oncall").post(
        f"/proposals/{proposal.pk}/load-tests/",
        {"files": [SimpleUploadedFile(name, content)], "card_peaks": "x,1"},
    )
    assert response.status_code == 400
    (message,) = response.context["load_test_form"].errors["files"]
    assert error in message


def test_a_card_peaks_line_that_is_no_number_names_its_line(client_as, personas):
    proposal = create_proposal(personas["oncall"])
    csv = SimpleUploadedFile("t.csv", CSV_HEADER + b"m,c,1,2\n")
    response = client_as("oncall").post(
        f"/proposals/{proposal.pk}/load-tests/",
        {"files": [csv], "card_peaks": "a,1\nb,lots"},
    )
    assert response.status_code == 400
    assert response.context["load_test_form"].errors["card_peaks"] == [
        "card peaks line 2: peak_gib 'lots' is not a number"
    ]


def test_too_many_load_test_files_are_refused(client_as, personas):
    proposal = create_proposal(personas["oncall"])
    files = [SimpleUploadedFile(f"r{i}.json", b"{}") for i in range(33)]
    response = client_as("oncall").post(f"/proposals/{proposal.pk}/load-tests/", {"files": files})
    assert response.status_code == 400
    assert response.context["load_test_form"].errors["files"] == [
        "At most 32 files (one per model)."
    ]


def test_the_openapi_document_lists_the_refusals(api):
    schema = api.get("/api/schema/?format=json").json()
    placement = schema["paths"]["/api/placement/"]["post"]["responses"]
    assert {"400", "401", "403", "415", "429"} <= placement.keys()
    samples = schema["paths"]["/api/hosts/{name}/samples/"]["get"]["responses"]
    assert {"400", "401", "403", "404"} <= samples.keys()
    assert samples["400"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    metrics = schema["paths"]["/metrics"]["get"]["responses"]
    assert "text/plain" in metrics["401"]["content"]


@pytest.mark.parametrize("page_size", ["null", "0", "-1", "501", "1.5", "many", "9" * 5000])
def test_a_page_size_that_is_no_page_size_answers_400(api, page_size):
    response = api.get("/api/hosts/", {"page_size": page_size})
    assert response.status_code == 400
    assert response.json() == {"page_size": "A whole number from 1 to 500."}


def test_the_openapi_document_types_the_placement_body_and_the_samples_refusal(api):
    schema = api.get("/api/schema/?format=json").json()
    body = schema["paths"]["/api/placement/"]["post"]["requestBody"]["content"]
    request = body["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(schema["components"]["schemas"][request]["required"]) == {"gpus", "models"}
    answer = schema["paths"]["/api/placement/"]["post"]["responses"]["200"]
    assert answer["content"]["application/json"]["schema"]["$ref"].endswith("PlacementAnswer")
    samples = schema["paths"]["/api/hosts/{name}/samples/"]["get"]["responses"]["400"]
    assert "longer than the longest retention" in samples["description"]
    (page_size,) = [
        p for p in schema["paths"]["/api/hosts/"]["get"]["parameters"] if p["name"] == "page_size"
    ]
    assert (page_size["schema"]["minimum"], page_size["schema"]["maximum"]) == (1, 500)


def test_a_samples_window_past_its_bounds_answers_400_naming_it(api, gpu):
    path = f"/api/hosts/{gpu.host.name}/samples/"
    long_ago = {"from": "2020-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}
    assert "the longest retention" in api.get(path, long_ago).json()["from"]
    fine = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", "step": 1}
    assert "at most 5000 points a series" in api.get(path, fine).json()["step"]


def test_a_chart_window_not_offered_answers_400(client_as, gpu):
    response = client_as("oncall").get(f"/hosts/{gpu.host.name}/charts/", {"window": "2y"})
    assert response.status_code == 400
    assert "one of 1h, 24h, 7d, 30d" in response.json()["window"]
