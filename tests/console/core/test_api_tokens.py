"""API tokens: the key is shown once, when made; afterwards only a fingerprint; the database
holds a digest; the API's token authentication works with it."""

import io

import pytest
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from console.core.api_tokens.models import ApiToken, digest_of
from tests.tokens import token_for

pytestmark = pytest.mark.django_db


def test_the_api_answers_a_token_s_key_and_nothing_else(personas):
    key = token_for(personas["oncall"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/hosts/").status_code == 200
    token = ApiToken.objects.get()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.digest}")
    assert client.get("/api/hosts/").status_code == 401  # the digest is no credential


def test_an_inactive_user_s_token_is_refused(personas):
    key = token_for(personas["oncall"])
    personas["oncall"].is_active = False
    personas["oncall"].save()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/hosts/").status_code == 401


def test_the_database_holds_no_key(personas):
    key = token_for(personas["oncall"])
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM console_apitoken")
        rows = cursor.fetchall()
    assert key not in str(rows)
    assert ApiToken.objects.get().digest == digest_of(key)


def test_the_admin_shows_the_key_once_then_only_the_fingerprint(admin_client, personas):
    created = admin_client.post("/admin/console/apitoken/add/", {"user": personas["oncall"].pk})
    key = created.context["key"]
    assert key in created.content.decode()
    token = ApiToken.objects.get()
    listing = admin_client.get("/admin/console/apitoken/").content.decode()
    detail = admin_client.get(f"/admin/console/apitoken/{token.pk}/change/").content.decode()
    assert token.fingerprint in listing
    for page in (listing, detail):
        assert key not in page
        assert token.digest not in page
    assert key not in str(admin_client.cookies)  # no message carried it


def test_the_command_prints_the_key_once(personas):
    out = io.StringIO()
    call_command("create_api_token", "oncall", stdout=out, stderr=io.StringIO())
    assert ApiToken.objects.get().digest == digest_of(out.getvalue().strip())
