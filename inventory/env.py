"""Typed access to settings that come from environment variables.

Every variable read here is listed, with its default, in `.env.example`.
"""

import os
from pathlib import Path

from dotenv import load_dotenv

ENV_FILE = Path(__file__).resolve().parent.parent / ".env"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class EnvError(ValueError):
    pass


def load_env_file() -> None:
    """Read the checkout's .env, if any, into the environment (read only, never written).

    The real environment wins over .env, so CI and one-off overrides behave as expected.
    """
    load_dotenv(ENV_FILE, override=False)


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise EnvError(f"{name}={raw!r}: expected one of {sorted(_TRUE | _FALSE - {''})}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r}: expected a whole number") from None
    if minimum is not None and value < minimum:
        raise EnvError(f"{name}={value}: must be at least {minimum}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r}: expected a number") from None
    if minimum is not None and value < minimum:
        raise EnvError(f"{name}={value}: must be at least {minimum}")
    return value


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]
