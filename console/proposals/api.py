"""The proposals API: create a proposal, read its status and gates; and POST /api/placement/,
the placement solver over HTTP (token or session auth)."""

import math
from contextlib import contextmanager

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError as DjangoValidationError
from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import Throttled, ValidationError
from rest_framework.generics import ListAPIView
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from console.core.access import get_visible_or_404, permission_name
from console.core.api_access import CanView
from console.core.parsers import MAX_JSON_NUMBER, BoundedJSONParser
from console.core.reason_text import render_here
from console.placement import PlacementInputError, solve
from console.proposals import placement_schema, services
from console.proposals.filters import ProposalFilter
from console.proposals.models import Proposal
from inventory.models import Deployment, Host, MigSlice, ServedModel


class CanPropose(BasePermission):
    """Creating a proposal needs the role's add permission (on-call and approvers)."""

    message = "Your role may not propose placement changes."

    def has_permission(self, request, view) -> bool:
        if request.method != "POST":
            return True
        return request.user.has_perm(permission_name(Proposal, "add"))


class ProposalCreateSerializer(serializers.Serializer):
    action = serializers.ChoiceField(Proposal.Action.choices, default=Proposal.Action.ADD)
    served_model = serializers.SlugRelatedField(
        slug_field="name", queryset=ServedModel.objects.all(), required=False
    )
    host = serializers.SlugRelatedField(
        slug_field="name", queryset=Host.objects.all(), required=False
    )
    deployment = serializers.PrimaryKeyRelatedField(
        queryset=Deployment.objects.all(), required=False, allow_null=True
    )
    cards = serializers.ListField(
        child=serializers.IntegerField(min_value=0),
        default=list,
        help_text="Card indexes on the host; empty when the solver chooses.",
    )
    let_solver_choose = serializers.BooleanField(default=False)
    card_count = serializers.IntegerField(min_value=1, max_value=16, default=1)
    mig_slice = serializers.PrimaryKeyRelatedField(
        queryset=MigSlice.objects.all(), required=False, allow_null=True
    )
    isolation_mode = serializers.ChoiceField(Deployment.Isolation.choices)
    mps_active_thread_percentage = serializers.IntegerField(
        min_value=1,
        max_value=100,
        required=False,
        allow_null=True,
        help_text="MPS only; left out, a move or resize keeps the deployment's share.",
    )
    kv_reservation_bytes = serializers.IntegerField(min_value=0, max_value=MAX_JSON_NUMBER)
    kv_reservation_basis = serializers.ChoiceField(
        Deployment.KvBasis.choices, default=Deployment.KvBasis.P95
    )
    # The columns' ranges: a PositiveIntegerField, and finite doubles.
    kv_tokens_per_request = serializers.IntegerField(
        min_value=1, max_value=2**31 - 1, required=False, allow_null=True
    )
    expected_p95_concurrency = serializers.FloatField(
        min_value=0, max_value=MAX_JSON_NUMBER, required=False, allow_null=True
    )
    expected_request_rate = serializers.FloatField(
        min_value=0, max_value=MAX_JSON_NUMBER, required=False, allow_null=True
    )
    admission_policy = serializers.ChoiceField(
        Deployment.Admission.choices, default=Deployment.Admission.NONE
    )
    canary_share_pct = serializers.IntegerField(min_value=1, max_value=100, default=10)
    rollout_steps = serializers.IntegerField(min_value=1, max_value=20, default=3)
    rationale = serializers.CharField()
    # How the engine sizes its memory (gate 5); see Deployment's engine-setting fields.
    engine_memory_fraction = serializers.FloatField(
        min_value=0.01, max_value=1.0, required=False, allow_null=True
    )
    engine_kv_cache_bytes = serializers.IntegerField(
        min_value=0, max_value=MAX_JSON_NUMBER, required=False, allow_null=True
    )
    engine_overhead_bytes = serializers.IntegerField(
        min_value=0, max_value=MAX_JSON_NUMBER, required=False, allow_null=True
    )
    engine_context_tokens = serializers.IntegerField(
        min_value=1, max_value=2**31 - 1, required=False, allow_null=True
    )
    engine_version = serializers.CharField(max_length=32, required=False, allow_blank=True)
    staggered_start = serializers.BooleanField(default=False)
    mps_acknowledged = serializers.BooleanField(
        default=False, help_text="Acknowledges the runbook note “MPS is not hard isolation”."
    )
    submit = serializers.BooleanField(default=False, help_text="Submit at once: the gates run.")

    def validate(self, data):
        deployment = data.get("deployment")
        if deployment is not None:
            data.setdefault("served_model", deployment.served_model)
            data.setdefault("host", deployment.host)
        errors = {}
        if data.get("served_model") is None:
            errors["served_model"] = "Give the model's name, or the deployment it runs in."
        if data.get("host") is None:
            errors["host"] = "Give the host's name."
        else:
            gpus = list(data["host"].gpus.filter(index__in=data["cards"]).order_by("index"))
            unknown = sorted(set(data["cards"]) - {gpu.index for gpu in gpus})
            if unknown:
                errors["cards"] = f"{data['host']} has no card {', '.join(map(str, unknown))}."
            data["gpus"] = gpus
        if errors:
            raise ValidationError(errors)
        return data


class GateSerializer(serializers.Serializer):
    gate = serializers.CharField()
    title = serializers.CharField()
    status = serializers.CharField(help_text="pass, fail, n/a or error")
    summary = serializers.CharField()
    reasons = serializers.ListField(child=serializers.CharField())
    numbers = serializers.DictField()
    runbook_url = serializers.CharField()
    checked_at = serializers.DateTimeField()


class DecisionSerializer(serializers.Serializer):
    kind = serializers.CharField()
    revision = serializers.IntegerField()
    decided_by = serializers.CharField()
    decided_at = serializers.DateTimeField()
    comment = serializers.CharField()
    voided = serializers.BooleanField()


class ProposalStatusSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField()
    state = serializers.CharField()
    revision = serializers.IntegerField()
    action = serializers.CharField()
    model = serializers.CharField()
    host = serializers.CharField()
    cards = serializers.ListField(child=serializers.CharField())
    author = serializers.CharField()
    gates = GateSerializer(many=True, help_text="Results for the current revision.")
    decisions = DecisionSerializer(many=True)


def _status(request, proposal: Proposal) -> dict:
    return {
        "id": proposal.pk,
        "url": request.build_absolute_uri(proposal.get_absolute_url()),
        "state": proposal.state,
        "revision": proposal.revision,
        "action": proposal.action,
        "model": proposal.served_model.name,
        "host": proposal.host.name,
        "cards": [str(gpu) for gpu in proposal.target_gpus()],
        "author": proposal.author.get_username(),
        "gates": [
            {
                "gate": result.gate,
                "title": result.title,
                "status": result.status,
                "summary": render_here(result.summary_reason) or result.summary,
                "reasons": [render_here(reason) for reason in result.reasons],
                "numbers": result.numbers,
                "runbook_url": request.build_absolute_uri(
                    reverse("runbook-detail", args=[result.runbook_slug])
                ),
                "checked_at": result.checked_at,
            }
            for result in services.current_results(proposal)
        ],
        "decisions": [
            {
                "kind": decision.kind,
                "revision": decision.revision,
                "decided_by": decision.decided_by.get_username(),
                "decided_at": decision.decided_at,
                "comment": decision.comment,
                "voided": decision.voided_at is not None,
            }
            for decision in proposal.decisions.select_related("decided_by")
        ],
    }


_PROPOSALS = Proposal.objects.select_related("served_model", "host", "author")


class ProposalList(ListAPIView):
    model = Proposal
    permission_classes = [CanView, CanPropose]
    serializer_class = ProposalStatusSerializer
    filterset_class = ProposalFilter

    def get_queryset(self):
        return _PROPOSALS.visible_to(self.request.user)

    @extend_schema(summary="Proposals, the most recently changed first")
    def get(self, request):
        proposals = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(
            ProposalStatusSerializer([_status(request, p) for p in proposals], many=True).data
        )

    @extend_schema(
        request=ProposalCreateSerializer,
        responses={201: ProposalStatusSerializer},
        summary="Propose a placement change",
        description="Creates a draft, or submits it at once with submit=true (the gates then "
        "run in the background; read the status to follow them). Bad input answers 400 with "
        "the reason per field.",
    )
    def post(self, request):
        data = ProposalCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        extras = {key: fields.pop(key) for key in ("gpus", "mps_acknowledged", "submit")}
        fields.pop("cards")
        try:
            proposal = services.do_create_proposal(acting_user=request.user, **extras, **fields)
        except DjangoValidationError as error:
            raise ValidationError(
                error.message_dict if hasattr(error, "error_dict") else error.messages
            ) from None
        return Response(
            ProposalStatusSerializer(_status(request, proposal)).data,
            status=status.HTTP_201_CREATED,
        )


class ProposalDetail(APIView):
    model = Proposal
    permission_classes = [CanView]

    @extend_schema(responses=ProposalStatusSerializer, summary="A proposal's state and gates")
    def get(self, request, pk: int):
        proposal = get_visible_or_404(request.user, _PROPOSALS, pk=pk)
        return Response(ProposalStatusSerializer(_status(request, proposal)).data)


_EXAMPLE = {
    "gpus": [{"id": "h1:0", "host": "h1", "type": "A100-SXM4-80GB", "memory_mib": 81920}],
    "models": [{"name": "m1", "memory_mib": 46080, "gpus": 1}],
    "policy": {"method": "auto", "time_limit_s": 5},
}


class Placement(APIView):
    model = Host  # whoever may read the fleet may ask where models would go
    permission_classes = [CanView]
    parser_classes = [BoundedJSONParser]

    @extend_schema(
        request=placement_schema.PlacementRequestSerializer,
        responses={200: placement_schema.PlacementAnswerSerializer},
        summary="Place models on GPU cards",
        description="The request and answer are documented in console/placement/README.md. "
        "Memory in MiB. Bad input answers 400 with one error per field, and so do a request "
        "over the size limit (cards times models, PLACEMENT_API_MAX_PAIRS) and one the greedy "
        "pass cannot answer within the time limit. One solve per user runs at a time; another "
        "answers 429 with Retry-After.",
        examples=[OpenApiExample("three A100s", value=_EXAMPLE, request_only=True)],
    )
    def post(self, request):
        body = request.data
        if not isinstance(body, dict):
            raise ValidationError({"errors": [{"field": "", "message": "must be an object"}]})
        refusal = _over_the_api_limits(body)
        if refusal:
            raise ValidationError({"errors": [refusal]})
        try:
            with one_solve_per_user(request.user, settings.PLACEMENT_API_MAX_TIME_S):
                return Response(solve(body))
        except PlacementInputError as invalid:
            raise ValidationError({"errors": invalid.as_dicts()}) from None


_SIZED = ("gpus", "models")


def _over_the_api_limits(body: dict) -> dict | None:
    """The limits of a solve over HTTP, checked before the solver reads the body: the time it
    may ask for, and its size (each model costs the greedy pass one walk over the cards)."""
    policy = body.get("policy") if isinstance(body.get("policy"), dict) else {}
    longest = settings.PLACEMENT_API_MAX_TIME_S
    asked = policy.get("time_limit_s")
    if isinstance(asked, int | float) and asked > longest:
        return {"field": "policy.time_limit_s", "message": f"at most {longest:g} s over the API"}
    cards, models = (len(v) if isinstance(v := body.get(k), list) else 0 for k in _SIZED)
    most = settings.PLACEMENT_API_MAX_PAIRS
    if cards * models > most:
        return {
            "field": "gpus",
            "message": f"{cards} cards x {models} models is over the API's size limit of "
            f"{most:,} card-model pairs (PLACEMENT_API_MAX_PAIRS); larger requests belong to "
            "manage.py place",
        }
    return None


@contextmanager
def one_solve_per_user(user, longest_s: float):
    """A user's second solve while the first runs answers 429: a solve holds a CPU for up to
    the time limit, and a script looping on the API (greedy solves too) would hold every
    worker. The slot is in the shared cache so that all web workers see it, and expires on its
    own should a worker die holding it."""
    slot = f"placement-solve:{user.pk}"
    retry_after = math.ceil(longest_s)
    if not cache.add(slot, "running", timeout=retry_after + 5):
        raise Throttled(
            wait=retry_after,
            detail="A placement solve of yours is still running; one at a time per user.",
        )
    try:
        yield
    finally:
        cache.delete(slot)
