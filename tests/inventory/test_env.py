import pytest

from inventory.env import EnvError, env_bool, env_float, env_int, env_list


def test_typed_helpers_read_and_default(monkeypatch):
    monkeypatch.setenv("X_INT", "42")
    monkeypatch.setenv("X_BOOL", "Yes")
    monkeypatch.setenv("X_LIST", "a, b,,c ")
    monkeypatch.setenv("X_FLOAT", "0.5")
    assert env_int("X_INT", 1) == 42
    assert env_int("X_MISSING", 7) == 7
    assert env_bool("X_BOOL") is True
    assert env_bool("X_MISSING", True) is True
    assert env_list("X_LIST") == ["a", "b", "c"]
    assert env_float("X_FLOAT", 1.0) == 0.5


@pytest.mark.parametrize(
    ("name", "value", "call", "message"),
    [
        ("X_INT", "ten", lambda: env_int("X_INT", 1), "expected a whole number"),
        ("X_INT", "-1", lambda: env_int("X_INT", 1, minimum=0), "must be at least 0"),
        ("X_BOOL", "maybe", lambda: env_bool("X_BOOL"), "expected one of"),
        ("X_FLOAT", "fast", lambda: env_float("X_FLOAT", 1.0), "expected a number"),
    ],
)
def test_bad_values_say_which_variable_and_why(monkeypatch, name, value, call, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(EnvError, match=message) as error:
        call()
    assert name in str(error.value)


def test_the_example_environment_lists_every_variable_the_code_reads():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    read = set()
    for folder in ("console", "inventory", "alerts", "runbooks"):
        for path in (root / folder).rglob("*.py"):
            read |= set(
                re.findall(r'env_(?:str|int|float|bool|list)\(\s*"([A-Z0-9_]+)"', path.read_text())
            )
    listed = set(re.findall(r"^#? ?([A-Z0-9_]+)=", (root / ".env.example").read_text(), re.M))
    assert read, "the pattern found no variable read: it no longer matches the helpers"
    assert read - listed == set()
