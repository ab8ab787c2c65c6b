"""manage.py loadtest: a combined load test of a host (or of a proposal's placement), here."""

import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from console.proposals.gate_checks import card_budgets
from console.proposals.loadtest import inputs as loadtest_inputs
from console.proposals.loadtest.execution import execute
from console.proposals.loadtest.plan import Phases, PlanError
from console.proposals.loadtest.tasks import bounds_for
from console.proposals.loadtest.views import plan_error_text
from console.proposals.models import Proposal
from inventory.analytics.units import format_gib
from inventory.models import Gpu, Host


class Command(BaseCommand):
    help = (
        "Drive every deployment of a host (or of a proposal's placement) at once at its "
        "busy-hour ratio, and print per model the rate, TTFT and end-to-end percentiles "
        "against its SLO and errors, per card the memory peak from telemetry and its bound, "
        "and which bound was reached first. Exits 1 when the run failed."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", required=True, help="the host's name")
        parser.add_argument("--proposal", type=int, help="test this proposal's placement")
        parser.add_argument("--duration", type=float, required=True, help="hold phase, s")
        parser.add_argument("--ramp", type=float, default=10.0, help="ramp phase, s")
        parser.add_argument(
            "--past-bound", action="store_true", help="then ramp past the busy hour"
        )
        parser.add_argument(
            "--rate-scale",
            type=float,
            default=1.0,
            help="scale the busy-hour rates, the ratio kept (0.1: a tenth of the traffic)",
        )
        parser.add_argument(
            "--rate",
            action="append",
            default=[],
            metavar="DEPLOYMENT_ID=RPS",
            help="a deployment's busy-hour rate, where its engine history has none",
        )
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args, host, proposal, duration, ramp, past_bound, rate_scale, **options):
        rates = {}
        for given in options["rate"]:
            key, _, value = given.partition("=")
            try:
                rates[int(key)] = float(value)
            except ValueError:
                raise CommandError(f"--rate {given!r}: expected DEPLOYMENT_ID=RPS") from None
        found = Host.objects.filter(name=host).first()
        if found is None:
            raise CommandError(f"no host {host!r}")
        phases = Phases(ramp_s=ramp, hold_s=duration, past_bound=past_bound)
        try:
            if proposal is not None:
                chosen = Proposal.objects.filter(pk=proposal, host=found).first()
                if chosen is None:
                    raise CommandError(f"no proposal {proposal} on {host}")
                gpus = chosen.target_gpus()
                bounds = bounds_for(chosen, gpus)
                plan = loadtest_inputs.plan_for_proposal(
                    chosen, phases=phases, rate_scale=rate_scale, rates=rates
                )
            else:
                gpus = list(found.gpus.exclude(mig_mode=Gpu.MigMode.ENABLED).order_by("index"))
                budgets = card_budgets(found, ())
                headroom = settings.GATE_HEADROOM_BYTES
                bounds = {str(g): budgets[g].usable_bytes - headroom for g in gpus}
                plan = loadtest_inputs.plan_for_host(
                    found, phases=phases, rate_scale=rate_scale, rates=rates
                )
        except PlanError as error:
            raise CommandError(plan_error_text(error)) from None
        executed = execute(plan, gpus, bounds)
        report = {
            "status": executed.status,
            "failure_code": executed.failure_code,
            "failure": executed.failure_params or {},
            "window": [moment.isoformat() for moment in executed.window],
            # what each deployment was offered at the hold, and where that rate came from
            "offered": [
                {"deployment": t.deployment, "rate_rps": t.rate_rps, "rate_source": t.rate_source}
                for t in plan.targets
            ],
            **executed.result,
        }
        report.pop("series")
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, default=str))
        else:
            self._print(report)
        if executed.status != "done":
            raise CommandError(f"the run {executed.status}: {executed.failure_code}")

    def _print(self, report: dict) -> None:
        out = self.stdout.write
        out(f"combined test {report['window'][0]} – {report['window'][1]}: {report['status']}")
        for offered in report["offered"]:
            out(f"  {offered['deployment']}: {offered['rate_rps']:g} requests/s offered "
                f"({offered['rate_source']})")  # fmt: skip
        out(f"{'model':<20} {'rate/s':>8} {'TTFT p50/p95/p99 ms':>22} {'E2E p50/p95/p99 ms':>22}"
            f" {'SLO':>6} {'errors':>8}")  # fmt: skip
        for m in report["models"]:
            ttft, e2e = m["ttft_ms"], m["e2e_ms"]
            out(
                f"{m['model']:<20} {m['rate_rps'] or 0:>8.2f} "
                f"{_three(ttft):>22} {_three(e2e):>22} {m['slo_ms'] or '—':>6} "
                f"{m['failed']:>8}" + (f"  {m['errors']}" if m["errors"] else "")
            )
        out(f"{'card':<20} {'peak (telemetry)':>18} {'bound':>12}")
        for c in report["cards"]:
            peak = format_gib(c["peak_bytes"]) if c["peak_bytes"] is not None else "no samples"
            out(f"{c['card']:<20} {peak:>18} {format_gib(c['bound_bytes']):>12}")
        first = report["first_bound"]
        if first is None:
            out("no bound reached")
        elif first["kind"] == "memory":
            out(f"first bound: {first['card']} memory at {first['at']} ({first['phase']})")
        else:
            out(
                f"first bound: {first['model']} P99 {first['p99_ms']:.0f} ms over "
                f"{first['slo_ms']} ms at {first['at']} ({first['phase']}), load "
                f"{first['load_rps']}"
            )
        if not report["telemetry_flushed"]:
            out("telemetry did not cover the end of the test: card peaks may be short")


def _three(figures: dict) -> str:
    if figures["p50"] is None:
        return "—"
    return f"{figures['p50']:.0f}/{figures['p95']:.0f}/{figures['p99']:.0f}"
