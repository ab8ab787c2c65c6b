"""Why a combined load test the console ran failed, as reason codes (the test keeps its
failure_code and failure_params; the result page renders them in the reader's language)."""

from inventory.analytics.reasons import Reason, gettext_noop, register

MESSAGES = register(
    {
        "loadtest.failed.runner_error": gettext_noop("The runner stopped with an error: {error}."),
        "loadtest.failed.worker_lost": gettext_noop(
            "The worker running the test was lost in its {phase} phase: the test ran past the "
            "task's limit of {limit_s} s and was given up. Start it again."
        ),
    }
)


def failure_reason(code: str, params: dict) -> Reason:
    return Reason(f"loadtest.failed.{code}", params)
