import pytest

from tests.console.proposals.support import tasks_in_process


@pytest.fixture
def eager_celery():
    with tasks_in_process() as app:
        yield app
