"""Every operation of /api/schema/, fuzzed by schemathesis against a fleet with telemetry:
no 5xx, and only the status codes, media types and shapes the document lists: each operation
alone, in sequences linked by what one answer gives the next (schemathesis' stateful run), and
with a NUL byte in every input.

Bounded for the suite: a few dozen examples an operation, the whole test in well under a
minute on two cores. Hypothesis' database is off so that every run draws afresh.
"""

import datetime as dt
import uuid

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from inventory.ingest.writer import ingest_batch
from inventory.models import Event
from inventory.timeseries import rollups
from tests.batches import GIB, batch, card_row, process_row
from tests.console.proposals.support import create_proposal
from tests.examples import examples
from tests.factories import DeploymentFactory, GpuFactory, RunbookNoteFactory
from tests.tokens import token_for

pytestmark = pytest.mark.django_db

EXAMPLES_PER_OPERATION = 25
CHECKS = [
    schemathesis.checks.not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture
def fleet(personas):
    """A host with two cards, a deployment, five minutes of samples, an OOM, a proposal (and
    so audit entries) and a runbook note: every endpoint has rows to work on."""
    gpu0 = GpuFactory(index=0)
    gpu1 = GpuFactory(index=1, host=gpu0.host)
    deployment = DeploymentFactory(host=gpu0.host, gpus=[gpu0])
    now = timezone.now().replace(microsecond=0)
    for minute in range(5):
        end = (now - dt.timedelta(minutes=4 - minute)).timestamp()
        ingest_batch(
            batch(
                gpu0.host,
                start=end - 60,
                end=end,
                cards=[
                    card_row(gpu0, used_max=41 * GIB, used_last=40 * GIB),
                    card_row(gpu1, used_max=GIB, used_last=GIB),
                ],
                processes=[
                    process_row(
                        gpu0, 77, used_max=40 * GIB, used_last=40 * GIB, deployment=deployment
                    )
                ],
            )
        )
    rollups.refresh_all()
    Event.objects.create(
        host=gpu0.host,
        gpu=gpu0,
        deployment=deployment,
        kind=Event.Kind.OOM,
        at=now,
        cause="true_peak",
        batch_id=uuid.uuid4(),
        position=0,
    )
    create_proposal(personas["oncall"], host=gpu0.host, gpus=[gpu0])
    RunbookNoteFactory()
    return gpu0.host


@pytest.fixture
def wsgi_app():
    # As Django's test client does: the test's transaction must outlive each request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def api(fleet, personas, wsgi_app):
    """The API document as on-call's token reads it, and that token's header."""
    auth = {"Authorization": f"Token {token_for(personas['oncall'])}"}
    return schemathesis.openapi.from_wsgi("/api/schema/", wsgi_app, headers=auth), auth


def test_no_operation_answers_a_server_error_or_an_undocumented_answer(api):
    schema, auth = api
    failures = {}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10  # every endpoint, not an empty document
    for operation in operations:
        cases = st.one_of(
            operation.as_strategy(GenerationMode.POSITIVE),
            operation.as_strategy(GenerationMode.NEGATIVE),
        )

        @given(case=cases)
        @settings(
            max_examples=examples(EXAMPLES_PER_OPERATION),
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def call(case):
            case.call_and_validate(headers=auth, checks=CHECKS)

        try:
            call()
        except (Failure, FailureGroup) as failure:
            failures[operation.label] = failure
    assert not failures, "\n\n".join(f"{label}: {failure}" for label, failure in failures.items())


def test_linked_calls_answer_as_documented(api):
    """Sequences of calls, each taking what the one before answered (a host's name from the
    host list into its samples and ledger, a proposal's id from its creation into its page)."""
    schema, auth = api

    class Linked(schema.as_state_machine()):
        def get_call_kwargs(self, case):
            return {"headers": auth}

        def validate_response(self, response, case, **kwargs):
            case.validate_response(response, checks=CHECKS)

    # The links schemathesis found in the document: without any, no call would take another's
    # answer and this would be the stateless test again.
    links = sum(len(entry.outgoing) for entry in Linked._transitions.operations.values())
    assert links >= 2
    Linked.run(
        settings=settings(
            max_examples=examples(EXAMPLES_PER_OPERATION),
            stateful_step_count=5,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )


NUL = "gpu\x00host-00"


def _body_fields(schema, operation) -> list[str]:
    """The top-level fields of the operation's JSON body, its schema's $ref followed."""
    document = schema.raw_schema
    body = document["paths"][operation.path][operation.method.lower()].get("requestBody", {})
    definition = body.get("content", {}).get("application/json", {}).get("schema", {})
    while "$ref" in definition:
        definition = document["components"]["schemas"][definition["$ref"].rsplit("/", 1)[1]]
    return list(definition.get("properties", {}))


def test_a_nul_byte_in_any_input_is_a_documented_refusal_not_a_server_error(api):
    """PostgreSQL cannot hold a NUL byte in text: every path segment, query parameter and body
    field of every operation gets one, and each is refused (400, naming the NUL) in an answer
    the document lists, whatever else the request gets wrong."""
    schema, auth = api
    sent, failures = 0, {}
    for operation in (result.ok() for result in schema.get_all_operations()):
        path = {parameter.name: NUL for parameter in operation.path_parameters}
        inputs = [{"query": {parameter.name: NUL}} for parameter in operation.query]
        inputs += [
            {"body": {field: NUL}, "media_type": "application/json"}
            for field in _body_fields(schema, operation)
        ]
        if path and not inputs:
            inputs = [{}]  # the NUL is in the path alone
        for given_input in inputs:
            case = schema.make_case(operation=operation, path_parameters=path, **given_input)
            label = f"{operation.label} {given_input}"
            try:
                response = case.call_and_validate(headers=auth, checks=CHECKS)
            except (Failure, FailureGroup) as failure:
                failures[label] = failure
            else:
                if response.status_code != 400 or "NUL" not in response.text:
                    failures[label] = f"answered {response.status_code}: {response.text[:200]}"
            sent += 1
    assert sent >= 40  # every input of every operation, not a handful
    assert not failures, "\n\n".join(f"{label}: {failure}" for label, failure in failures.items())
