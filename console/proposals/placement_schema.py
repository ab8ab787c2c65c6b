"""What the OpenAPI document says POST /api/placement/ reads and answers.

Documentation only: the solver validates the body itself (console.placement.schema, with one
error per field in its own shape), so these serializers only describe it, from the same bounds.
"""

from rest_framework import serializers

from console.placement.schema import (
    DEFAULT_POLICY,
    DEFAULT_PRIORITY,
    ISOLATIONS,
    MAX_MEMORY_MIB,
    MAX_MODEL_GPUS,
    MAX_PRIORITY,
    MAX_TIME_LIMIT_S,
    METHODS,
)


def _memory(help_text: str = "MiB", **kwargs) -> serializers.IntegerField:
    return serializers.IntegerField(max_value=MAX_MEMORY_MIB, help_text=help_text, **kwargs)


class MigSliceRequestSerializer(serializers.Serializer):
    profile = serializers.CharField(help_text="3g.40gb, MIG 3g.40gb or 1c.3g.40gb")
    start = serializers.IntegerField(min_value=0)
    model = serializers.CharField(required=False)


class GpuRequestSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="Unique among the request's cards.")
    host = serializers.CharField()
    type = serializers.CharField(required=False, allow_blank=True, help_text="Needed for MIG.")
    memory_mib = _memory(min_value=1)
    used_mib = _memory(min_value=0, required=False, default=0)
    mig = serializers.BooleanField(required=False, default=False)
    models = serializers.ListField(child=serializers.CharField(), required=False)
    mig_slices = MigSliceRequestSerializer(many=True, required=False)


class ModelRequestSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="Unique among the request's models.")
    memory_mib = _memory(min_value=0, help_text="MiB per card")
    gpus = serializers.IntegerField(min_value=1, max_value=MAX_MODEL_GPUS, default=1)
    exclusive = serializers.BooleanField(default=False)
    priority = serializers.IntegerField(
        min_value=0, max_value=MAX_PRIORITY, default=DEFAULT_PRIORITY, help_text="Lower first."
    )
    isolation = serializers.ChoiceField(ISOLATIONS, default="any")


class PolicySerializer(serializers.Serializer):
    method = serializers.ChoiceField(METHODS, default=DEFAULT_POLICY["method"])
    time_limit_s = serializers.FloatField(
        min_value=0,
        max_value=MAX_TIME_LIMIT_S,
        default=DEFAULT_POLICY["time_limit_s"],
        help_text="Covers the whole solve; over the API at most PLACEMENT_API_MAX_TIME_S.",
    )
    headroom_mib = _memory(min_value=0, default=DEFAULT_POLICY["headroom_mib"])
    whole_card = serializers.BooleanField(default=DEFAULT_POLICY["whole_card"])


class PlacementRequestSerializer(serializers.Serializer):
    gpus = GpuRequestSerializer(
        many=True, help_text="Cards times models at most PLACEMENT_API_MAX_PAIRS."
    )
    models = ModelRequestSerializer(many=True)
    policy = PolicySerializer(required=False)
    about = serializers.JSONField(required=False, help_text="Free text, ignored.")


class ReasonSerializer(serializers.Serializer):
    code = serializers.CharField()
    params = serializers.DictField()


class AssignmentSerializer(serializers.Serializer):
    model = serializers.CharField()
    gpus = serializers.ListField(child=serializers.CharField())
    mig_profile = serializers.CharField(allow_null=True)
    mig_start = serializers.IntegerField(allow_null=True)
    mps_active_thread_percentage = serializers.IntegerField(allow_null=True)


class UnplacedSerializer(serializers.Serializer):
    model = serializers.CharField()
    reason = serializers.CharField()
    reason_detail = ReasonSerializer()


class MigSliceAnswerSerializer(serializers.Serializer):
    profile = serializers.CharField()
    start = serializers.IntegerField()
    model = serializers.CharField(allow_null=True)


class CardAnswerSerializer(serializers.Serializer):
    id = serializers.CharField()
    used_mib = serializers.IntegerField()
    free_mib = serializers.IntegerField()
    models = serializers.ListField(child=serializers.CharField())
    mig_slices = MigSliceAnswerSerializer(many=True)


class PlacementAnswerSerializer(serializers.Serializer):
    assignments = AssignmentSerializer(many=True)
    unplaced = UnplacedSerializer(many=True)
    cards = CardAnswerSerializer(many=True)
    cards_used = serializers.IntegerField()
    lower_bound = serializers.IntegerField()
    optimal = serializers.BooleanField()
    method = serializers.ChoiceField(["greedy", "exact"])
    formulation = serializers.ChoiceField(["best-fit-decreasing", "arc-flow", "cp-sat-assignment"])
    stranded_mib = serializers.IntegerField()
    solve_ms = serializers.IntegerField()
