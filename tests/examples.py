"""How many examples a property test runs: its full count under the `ci` profile (what CI
runs), a fifth of it in the default `dev` profile of a local loop.

HYPOTHESIS_PROFILE=ci make test runs locally what CI runs.
"""

import os

from hypothesis import settings

FULL = os.environ.get("HYPOTHESIS_PROFILE", "dev") == "ci"

settings.register_profile("ci", print_blob=True)
settings.register_profile("dev", max_examples=20)
settings.load_profile("ci" if FULL else "dev")


def examples(count: int) -> int:
    return count if FULL else max(10, count // 5)
