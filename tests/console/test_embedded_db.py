"""The embedded engine starts its server on a connection, and only then."""

import pytest
from django.db import connection
from django.db.utils import ConnectionHandler

from console.database import database_settings
from console.embedded_db import base


def test_database_url_picks_the_server_and_its_absence_the_embedded_one():
    named = database_settings("postgresql://u@db.example:5433/console", conn_max_age=0)
    assert (named["ENGINE"], named["HOST"]) == ("django.db.backends.postgresql", "db.example")
    embedded = database_settings("", conn_max_age=0)
    assert (embedded["ENGINE"], embedded["HOST"]) == ("console.embedded_db", "")
    with pytest.raises(ValueError, match="PostgreSQL"):
        database_settings("sqlite:///console.db", conn_max_age=0)


@pytest.mark.django_db
def test_the_first_connection_starts_the_server_and_later_ones_reuse_its_address(monkeypatch):
    # This test's own server stands in for the embedded one (a URL may name its socket folder
    # as ?host=, which lands in OPTIONS).
    real = connection.settings_dict
    address = {"HOST": real["HOST"] or real["OPTIONS"]["host"], "PORT": str(real["PORT"])}
    starts = []

    def start_server():
        starts.append("started")
        return address

    monkeypatch.setattr(base, "embedded_server_address", start_server)
    settings = database_settings("", conn_max_age=0)
    settings.update(NAME=real["NAME"], USER=real["USER"], PASSWORD=real["PASSWORD"])
    embedded = ConnectionHandler({"default": settings})["default"]
    assert embedded.vendor == "postgresql"
    assert starts == [], "a connection object alone starts nothing"
    for _ in range(2):
        with embedded.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
        embedded.close()
    assert starts == ["started"]
    assert embedded.settings_dict["HOST"] == address["HOST"]
