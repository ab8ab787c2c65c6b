"""How ingest hands a batch's values to PostgreSQL."""

import datetime as dt

import orjson


def timestamp(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def json_parameter(value) -> str:
    """A statement's list of values as one JSON parameter: psycopg quotes an array's elements
    one by one, in Python, which for a group's hundreds cost more than the statement."""
    return orjson.dumps(value).decode()
