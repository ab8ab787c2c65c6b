"""A database made before the apps moved (the demo fleet, migrated at 1da9c2c and dumped to
tests/fixtures/schema/before-the-house.sql.gz) upgrades in place: the moved apps kept their
labels, so `migrate` finds every migration applied, no model wants a new one, every content
type and audit row still names a model, and the rows read back through the ORM."""

import gzip
import json
import os
import subprocess
import sys
import urllib.parse
import uuid

import psycopg
import pytest
from django.db import connection

from tests.conftest import FIXTURES
from tests.processes import BASE_DIR

DUMP = FIXTURES / "schema" / "before-the-house.sql.gz"

# What the dump holds, counted when it was made.
_ROWS_THEN = {"inventory_host": 5, "console_auditentry": 13, "proposals_proposal": 1}

_READ_BACK = """
import json
from django.contrib.contenttypes.models import ContentType
from console.core.models import AuditEntry
from console.proposals.models import Proposal
from inventory.models import Host
from runbooks.models import RunbookNote
print(json.dumps({
    "unresolved": sorted(f"{t.app_label}.{t.model}" for t in ContentType.objects.all()
                         if t.model_class() is None),
    "audited_gone": sum(1 for entry in AuditEntry.objects.select_related("content_type")
                        if entry.content_type.model_class() is None),
    "hosts": sorted(Host.objects.values_list("name", flat=True)),
    "proposals": Proposal.objects.count(),
    "notes": RunbookNote.objects.count(),
}))
"""


@pytest.fixture
def copy_of_the_old_database():
    """A database of its own, loaded from the dump; dropped afterwards."""
    params = connection.get_connection_params()
    admin = {k: params[k] for k in ("host", "port", "user", "password") if params.get(k)}
    name = f"schema_before_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as server:
        server.execute(f'CREATE DATABASE "{name}"')
    try:
        with psycopg.connect(dbname=name, autocommit=True, **admin) as copy:
            copy.execute(gzip.decompress(DUMP.read_bytes()).decode())
        user = f"{admin['user']}@" if admin.get("user") else ""
        # The embedded server's host is its socket folder: a URL carries it percent-encoded.
        host = urllib.parse.quote(admin.get("host", "127.0.0.1"), safe="")
        server_address = f"{host}:{admin.get('port', 5432)}"
        yield f"postgresql://{user}{server_address}/{name}"
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **admin) as server:
            server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _manage(url: str, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "manage.py", *argv],
        cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


@pytest.mark.django_db
def test_a_database_of_the_old_layout_upgrades_in_place(copy_of_the_old_database):
    url = copy_of_the_old_database
    with psycopg.connect(url) as copy:
        before = {t: copy.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _ROWS_THEN}
    assert before == _ROWS_THEN

    migrated = _manage(url, "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stderr
    unapplied = _manage(url, "migrate", "--check")
    assert unapplied.returncode == 0, unapplied.stdout + unapplied.stderr
    wanted = _manage(url, "makemigrations", "--check", "--dry-run")
    assert wanted.returncode == 0, wanted.stdout

    read = _manage(url, "shell", "-c", _READ_BACK)
    assert read.returncode == 0, read.stderr
    found = json.loads(read.stdout.strip().splitlines()[-1])
    assert found["unresolved"] == []
    assert found["audited_gone"] == 0
    assert found["hosts"] == ["a100-node", "infer-00", "infer-01", "mig-h200", "mps-l40s"]
    assert found["proposals"] == _ROWS_THEN["proposals_proposal"]
    assert found["notes"] > 0
