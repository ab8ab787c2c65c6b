"""The plan of a combined load test (pure: no Django).

A plan names every deployment that shares the cards under test, how to reach it (OpenAI
``/v1/completions`` or ``/v1/chat/completions``, or Ollama's ``/api/generate``), the rate it
gets at the busy hour, the request mix, and the phases:

- cold start: every engine restarted at the same moment, then the load starts. Co-located vLLM
  instances that start together can fail to allocate their cache blocks (vllm#9198, #18974);
  only a simultaneous start shows it. Run only when every target has a restart URL; otherwise
  skipped and the plan says why;
- ramp: from nothing to the busy-hour rates, linearly, every model at once;
- hold: at the busy-hour rates, the ratio between models kept;
- past the bound (optional): on up to ``past_bound_max_factor`` times those rates, so the test
  shows which bound gives first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum

MAX_RATE_RPS = 10_000.0
MAX_DURATION_S = 6 * 3600


class Api(StrEnum):
    COMPLETIONS = "openai-completions"
    CHAT = "openai-chat"
    OLLAMA = "ollama"

    @property
    def path(self) -> str:
        return {
            Api.COMPLETIONS: "/v1/completions",
            Api.CHAT: "/v1/chat/completions",
            Api.OLLAMA: "/api/generate",
        }[self]


class Phase(StrEnum):
    COLD_START = "cold_start"
    RAMP = "ramp"
    HOLD = "hold"
    PAST_BOUND = "past_bound"
    DONE = "done"


class PlanError(ValueError):
    """A plan that cannot run; ``code`` and ``params`` say why."""

    def __init__(self, code: str, **params) -> None:
        super().__init__(f"{code}: {params}")
        self.code = code
        self.params = params


@dataclass(frozen=True)
class RequestMix:
    """Prompt and output lengths in tokens: short requests, long ones, and the long share."""

    short_prompt_tokens: int = 128
    short_output_tokens: int = 32
    long_prompt_tokens: int = 2048
    long_output_tokens: int = 256
    long_share: float = 0.2


@dataclass(frozen=True)
class Target:
    name: str  # the served model; several deployments of one model count as that model
    deployment: str  # who it is in the console ("chat-large #4"); the plan's key
    url: str  # the endpoint's base, without the API path
    api: Api
    rate_rps: float  # busy-hour requests per second of this deployment
    rate_source: str  # "telemetry", live traffic (inputs.LIVE_SOURCE), "given" or "proposal"
    slo_ms: int | None
    cards: tuple[str, ...]
    isolation: str
    engine_model: str = ""  # the "model" field the engine expects; the name when empty
    restart_url: str = ""
    deployment_id: int | None = None  # the console's deployment; None for a proposed model
    # Its busy-hour rate in the engine history when the plan was made (unscaled): the real
    # traffic gate 4 holds the test's ratio to.
    real_rps: float | None = None

    @property
    def request_url(self) -> str:
        return self.url.rstrip("/") + Api(self.api).path

    @property
    def path(self) -> str:
        """The request's path on its endpoint's host."""
        return "/" + self.request_url.split("://", 1)[-1].partition("/")[2]


@dataclass(frozen=True)
class Phases:
    ramp_s: float = 30.0
    hold_s: float = 120.0
    past_bound: bool = False
    past_bound_s: float = 60.0
    past_bound_max_factor: float = 3.0
    cold_start: bool = True  # asked for; runs only where every target can be restarted


@dataclass(frozen=True)
class LoadTestPlan:
    host: str
    targets: tuple[Target, ...]
    mix: RequestMix = field(default_factory=RequestMix)
    phases: Phases = field(default_factory=Phases)
    request_timeout_s: float = 30.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.targets:
            raise PlanError("no_targets", host=self.host)
        for target in self.targets:
            if not 0 < target.rate_rps <= MAX_RATE_RPS:
                raise PlanError("bad_rate", deployment=target.deployment, rate=target.rate_rps)
            if not target.url.startswith(("http://", "https://")):
                raise PlanError("no_endpoint", deployment=target.deployment)
        mix = self.mix
        if not 0 <= mix.long_share <= 1:
            raise PlanError("bad_mix", long_share=mix.long_share)
        if self.duration_s > MAX_DURATION_S or self.duration_s <= 0:
            raise PlanError("bad_duration", duration_s=self.duration_s)

    @property
    def cold_start_skipped(self) -> dict | None:
        """Why the simultaneous start does not run, as a code and parameters; None if it does."""
        if not self.phases.cold_start:
            return {"code": "cold_start_not_asked", "params": {}}
        cannot = [t.deployment for t in self.targets if not t.restart_url]
        if cannot:
            return {"code": "cold_start_not_restartable", "params": {"deployments": cannot}}
        return None

    @property
    def duration_s(self) -> float:
        phases = self.phases
        past = phases.past_bound_s if phases.past_bound else 0.0
        return phases.ramp_s + phases.hold_s + past

    def phase_at(self, t: float) -> Phase:
        """The load phase at ``t`` seconds after the load started (after any cold start)."""
        phases = self.phases
        if t < phases.ramp_s:
            return Phase.RAMP
        if t < phases.ramp_s + phases.hold_s:
            return Phase.HOLD
        if t < self.duration_s:
            return Phase.PAST_BOUND
        return Phase.DONE

    def load_factor(self, t: float) -> float:
        """Share of the busy-hour rates offered at ``t``: 0 → 1 in the ramp, 1 in the hold,
        then up to ``past_bound_max_factor`` past it."""
        phases = self.phases
        phase = self.phase_at(t)
        if phase is Phase.RAMP:
            return t / phases.ramp_s
        if phase is Phase.HOLD:
            return 1.0
        if phase is Phase.PAST_BOUND:
            into = (t - phases.ramp_s - phases.hold_s) / phases.past_bound_s
            return 1.0 + into * (phases.past_bound_max_factor - 1.0)
        return 0.0

    def ratio(self) -> dict[str, float]:
        """Each model's share of the busy-hour requests (deployments of a model together)."""
        rates: dict[str, float] = {}
        for target in self.targets:
            rates[target.name] = rates.get(target.name, 0.0) + target.rate_rps
        total = sum(rates.values())
        return {name: rate / total for name, rate in rates.items()}

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> LoadTestPlan:
        return cls(
            host=data["host"],
            targets=tuple(
                Target(**{**t, "api": Api(t["api"]), "cards": tuple(t["cards"])})
                for t in data["targets"]
            ),
            mix=RequestMix(**data["mix"]),
            phases=Phases(**data["phases"]),
            request_timeout_s=data["request_timeout_s"],
            seed=data.get("seed", 0),
        )


def busy_hour_rates(
    minutes: dict[str, list[tuple[float, float, float | None]]],
) -> dict[str, float]:
    """Requests per second of each deployment in the busiest hour of them all together.

    ``minutes``: per deployment, (epoch seconds of the minute, requests counted in it, the
    seconds they were counted over). A minute row may hold more or less than a minute's
    requests (an agent flushing every 10 minutes puts ten minutes in one row), so a rate is
    always requests over the seconds they cover; a row without its seconds (written before the
    windows were kept) counts as one minute. The hour is the one whose rates, all deployments
    summed, are highest.
    """
    per_hour: dict[int, dict[str, list[float]]] = {}
    for key, rows in minutes.items():
        for at, requests, seconds in rows:
            counted = per_hour.setdefault(int(at // 3600), {}).setdefault(key, [0.0, 0.0])
            counted[0] += requests
            counted[1] += 60.0 if seconds is None else seconds
    rates_by_hour = [
        {key: requests / seconds for key, (requests, seconds) in hour.items() if seconds > 0}
        for _, hour in sorted(per_hour.items())
    ]
    rates_by_hour = [rates for rates in rates_by_hour if rates]
    if not rates_by_hour:
        return {}
    return max(rates_by_hour, key=lambda rates: sum(rates.values()))
