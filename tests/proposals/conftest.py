import pytest

from tests.proposals.support import tasks_in_process


@pytest.fixture
def eager_celery():
    with tasks_in_process() as app:
        yield app
