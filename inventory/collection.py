"""What a host agent needs to know to collect a host: its collection plan.

The plan is built here, from the inventory, and sent to the agent through the broker: agents
never read the database. The plan's deployment entries follow the format that
inventory.telemetry.process_mapping documents.

Beat sends a host its plan when the plan changed and, slowly, again when it did not (so that
a plan lost on the broker is repaired); an agent keeps its plan and asks for it again when it
has had none for `valid_for_s` (inventory.tasks). The digest tells what changed.
"""

import hashlib
import json
import time

from django.conf import settings
from django.db.models import Prefetch, QuerySet

from inventory.models import Deployment, Host

SIMULATOR_QUEUE = "host.simulator"
# Simulated hosts that a simulator agent of their own collects (SIMULATOR_FLEET names the same
# fleet), named by the host's `simulator` label: the operations demo's host has an actions
# file, which the demo fleet's agent must not have.
SIMULATED_FLEETS = ("operations",)


def agent_queue(host: Host) -> str:
    """Real hosts each have their agent; a simulator agent stands in for the simulated ones."""
    if host.collector == Host.Collector.SIMULATED:
        fleet = (host.labels or {}).get("simulator")
        return f"{SIMULATOR_QUEUE}.{fleet}" if fleet in SIMULATED_FLEETS else SIMULATOR_QUEUE
    return f"host.{host.name}"


def live_deployments() -> QuerySet[Deployment]:
    """The deployments a plan lists, in an order of their own: the same plan, the same digest."""
    return (
        Deployment.objects.exclude(status=Deployment.Status.STOPPED)
        .select_related("served_model", "mig_slice")
        .prefetch_related("gpus")
        .order_by("pk")
    )


def hosts_with_plans() -> QuerySet[Host]:
    """Every collected host, its deployments fetched with it: a beat pass over 10,000 hosts
    reads them in a few queries, not a few a host."""
    return (
        Host.objects.exclude(collector=Host.Collector.NONE)
        .exclude(status=Host.Status.RETIRED)
        .prefetch_related(Prefetch("deployments", live_deployments(), to_attr="live_deployments"))
    )


def collection_plan(host: Host) -> dict:
    deployments = getattr(host, "live_deployments", None)
    if deployments is None:
        deployments = live_deployments().filter(host=host)
    plan = {
        "host": host.name,
        "collector": host.collector,
        "sample_interval_s": settings.AGENT_SAMPLE_INTERVAL_S,
        "flush_interval_s": settings.AGENT_FLUSH_INTERVAL_S,
        "scrape_interval_s": settings.AGENT_SCRAPE_INTERVAL_S,
        "issued_at": time.time(),
        "deployments": [_deployment_entry(deployment) for deployment in deployments],
        # An agent that has had no plan (nor word that its plan still holds) for this long
        # asks for it: beat's refresh is due before that.
        "valid_for_s": settings.COLLECTION_PLAN_REFRESH_S + 2 * settings.COLLECTION_PLAN_INTERVAL_S,
    }
    plan["digest"] = plan_digest(plan)
    return plan


def plan_digest(plan: dict) -> str:
    """What the plan says, as a digest: equal for equal plans whenever they were issued."""
    content = {key: value for key, value in plan.items() if key not in ("issued_at", "digest")}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def _deployment_entry(deployment: Deployment) -> dict:
    model = deployment.served_model
    if deployment.mig_slice_id and deployment.mig_slice.uuid:
        devices = [deployment.mig_slice.uuid]
    else:
        devices = [gpu.uuid for gpu in deployment.gpus.all()]
    entry = {
        "deployment_id": str(deployment.pk),
        "model": model.name,
        "engine": model.engine,
        "metrics_url": model.metrics_url,
        "runtime_name": deployment.runtime_name,
        "device_uuids": devices,
        "process_name_pattern": deployment.process_name_pattern or None,
        # Kubernetes: its pods' GPU processes are its own (inventory.telemetry.pod_attribution).
        "pod_namespace": deployment.pod_namespace or None,
        "pod_selector": deployment.pod_selector or None,
    }
    # only where set: an entry without them is what agents before them expect
    if deployment.log_path:
        entry["log_path"] = deployment.log_path
    if deployment.allocator_url:
        entry["allocator_url"] = deployment.allocator_url
    return entry
