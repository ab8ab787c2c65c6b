"""Shapes of the telemetry API's answers (they also document it in the OpenAPI schema)."""

import datetime as dt

from django.utils import timezone
from rest_framework import serializers

from console.core.filters import EARLIEST, LATEST
from inventory.models import Event

# The coarsest step a chart reads (the 1 h rollup's day-long points).
MAX_STEP_S = 86400


class CollectorHealthSerializer(serializers.Serializer):
    last_sample_at = serializers.DateTimeField(allow_null=True)
    age_s = serializers.FloatField(allow_null=True, help_text="Seconds since the newest sample.")
    stale = serializers.BooleanField(help_text="No sample within COLLECTOR_STALE_AFTER_S.")
    batches = serializers.IntegerField()
    missing_batches = serializers.IntegerField(help_text="Batches sent that never arrived.")
    faults_last_batch = serializers.IntegerField()
    outbox_depth = serializers.IntegerField(help_text="Batches waiting on the host.")
    outbox_dropped = serializers.IntegerField()


HEADROOM_HELP = (
    "Total - driver reserved - peak used over the last two hours (before `at` for a ledger); "
    "null: nothing measured then."
)


class CardNowSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    uuid = serializers.CharField()
    product = serializers.CharField()
    total_bytes = serializers.IntegerField()
    used_bytes = serializers.IntegerField(allow_null=True)
    reserved_bytes = serializers.IntegerField(allow_null=True, help_text="Driver-reserved.")
    free_bytes = serializers.IntegerField(allow_null=True)
    sampled_at = serializers.DateTimeField(allow_null=True)
    lost = serializers.BooleanField()
    headroom_bytes = serializers.IntegerField(allow_null=True, help_text=HEADROOM_HELP)


class HostSummarySerializer(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.CharField()
    url = serializers.CharField()
    last_sample_at = serializers.DateTimeField(allow_null=True)
    collector = CollectorHealthSerializer()
    cards = CardNowSerializer(many=True)


class OomEventSerializer(serializers.ModelSerializer):
    host = serializers.SlugRelatedField(slug_field="name", read_only=True)
    card = serializers.IntegerField(source="gpu.index", allow_null=True, read_only=True)
    model = serializers.CharField(
        source="deployment.served_model.name",
        allow_null=True,
        read_only=True,
        help_text="null: no deployment recorded on the card.",
    )
    cause = serializers.CharField(read_only=True, help_text="Empty: not triaged.")

    class Meta:
        model = Event
        fields = ["id", "at", "host", "card", "model", "cause", "cause_explanation"]


def within_telemetry_years(moment: dt.datetime) -> None:
    if not EARLIEST <= moment < LATEST:
        raise serializers.ValidationError(
            f"must be from {EARLIEST:%Y-%m-%d} to before {LATEST:%Y-%m-%d}, "
            f"not {timezone.localtime(moment):%Y-%m-%d}"
        )


class SamplesQuerySerializer(serializers.Serializer):
    gpu = serializers.IntegerField(
        required=False, min_value=0, max_value=255, help_text="Card index."
    )
    start = serializers.DateTimeField(
        required=False,
        validators=[within_telemetry_years],
        help_text="ISO 8601; default: an hour before `to`.",
    )
    end = serializers.DateTimeField(
        required=False, validators=[within_telemetry_years], help_text="ISO 8601; default: now."
    )
    step = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_STEP_S,
        help_text="Seconds per point; default: a sensible one.",
    )

    def get_fields(self):
        # The query string says from= and to=, which Python does not allow as attribute names.
        fields = super().get_fields()
        fields["from"] = fields.pop("start")
        fields["to"] = fields.pop("end")
        return fields


class CardPointSerializer(serializers.Serializer):
    ts = serializers.DateTimeField()
    used_max = serializers.IntegerField(allow_null=True)
    used_mean = serializers.IntegerField(allow_null=True)
    reserved = serializers.IntegerField(allow_null=True)
    free_min = serializers.IntegerField(allow_null=True)
    total = serializers.IntegerField(allow_null=True)
    util_gpu_max = serializers.IntegerField(allow_null=True)
    frag_index_max = serializers.FloatField(allow_null=True)
    lost = serializers.BooleanField(allow_null=True)


class CardSeriesSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    uuid = serializers.CharField()
    points = CardPointSerializer(many=True)


class ProcessPointSerializer(serializers.Serializer):
    ts = serializers.DateTimeField()
    used_max = serializers.IntegerField(allow_null=True)
    frag_index_max = serializers.FloatField(allow_null=True)


class ProcessSeriesSerializer(serializers.Serializer):
    gpu = serializers.IntegerField(help_text="Card index.")
    pid = serializers.IntegerField()
    name = serializers.CharField(allow_null=True)
    deployment = serializers.IntegerField(allow_null=True)
    points = ProcessPointSerializer(many=True)


class SamplesSerializer(serializers.Serializer):
    host = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    step_s = serializers.IntegerField()
    source = serializers.ChoiceField(choices=["raw", "1m", "1h"])
    cards = CardSeriesSerializer(many=True)
    processes = ProcessSeriesSerializer(many=True)


class LedgerQuerySerializer(serializers.Serializer):
    at = serializers.DateTimeField(
        required=False,
        validators=[within_telemetry_years],
        help_text="ISO 8601; default: now. The newest samples at or before it.",
    )


class LedgerLineSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="model_weights, kv_cache_used, fragmentation, free...")
    bytes = serializers.IntegerField()
    basis = serializers.ChoiceField(choices=["measured", "estimated"])
    source = serializers.CharField()
    deployment = serializers.CharField(allow_null=True)
    pid = serializers.IntegerField(allow_null=True)


class CardLedgerSerializer(serializers.Serializer):
    card = serializers.CharField()
    index = serializers.IntegerField()
    uuid = serializers.CharField()
    sampled_at = serializers.DateTimeField(allow_null=True, help_text="null: no telemetry")
    total_bytes = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["green", "amber", "red"])
    status_reason = serializers.CharField()
    headroom_bytes = serializers.IntegerField(allow_null=True, help_text=HEADROOM_HELP)
    lines = LedgerLineSerializer(many=True, help_text="They sum to total_bytes exactly.")
    notes = serializers.ListField(child=serializers.CharField())
