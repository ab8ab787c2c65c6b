from inventory.models.fleet import KV_DTYPES, Deployment, Gpu, Host, MigSlice, ServedModel
from inventory.models.refusal import CardRefusal
from inventory.models.summary import HostSummary, HostSummaryRun
from inventory.models.telemetry import (
    CardSample,
    CollectorFault,
    CollectorStatus,
    DeadLetter,
    EngineSample,
    Event,
    IngestedBatch,
    MigSample,
    PlanDelivery,
    ProcessSample,
)

__all__ = [
    "KV_DTYPES",
    "CardRefusal",
    "CardSample",
    "CollectorFault",
    "CollectorStatus",
    "DeadLetter",
    "Deployment",
    "EngineSample",
    "Event",
    "Gpu",
    "Host",
    "HostSummary",
    "HostSummaryRun",
    "IngestedBatch",
    "MigSample",
    "MigSlice",
    "PlanDelivery",
    "ProcessSample",
    "ServedModel",
]
