from inventory.models.fleet import KV_DTYPES, Deployment, Gpu, Host, MigSlice, ServedModel
from inventory.models.telemetry import (
    CardSample,
    CollectorFault,
    CollectorStatus,
    EngineSample,
    Event,
    IngestedBatch,
    MigSample,
    ProcessSample,
)

__all__ = [
    "KV_DTYPES",
    "CardSample",
    "CollectorFault",
    "CollectorStatus",
    "Deployment",
    "EngineSample",
    "Event",
    "Gpu",
    "Host",
    "IngestedBatch",
    "MigSample",
    "MigSlice",
    "ProcessSample",
    "ServedModel",
]
