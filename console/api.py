"""POST /api/placement/: the placement solver over HTTP."""

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from console.placement import PlacementInputError, solve
from inventory.api.permissions import CanView
from inventory.models import Host

_EXAMPLE = {
    "gpus": [{"id": "h1:0", "host": "h1", "type": "A100-SXM4-80GB", "memory_mib": 81920}],
    "models": [{"name": "m1", "memory_mib": 46080, "gpus": 1}],
    "policy": {"method": "auto", "time_limit_s": 5},
}


class Placement(APIView):
    model = Host  # whoever may read the fleet may ask where models would go
    permission_classes = [CanView]

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT},
        summary="Place models on GPU cards",
        description="The request and answer are documented in console/placement/README.md. "
        "Memory in MiB. Bad input answers 400 with one error per field.",
        examples=[OpenApiExample("three A100s", value=_EXAMPLE, request_only=True)],
    )
    def post(self, request):
        body = request.data
        if not isinstance(body, dict):
            raise ValidationError({"errors": [{"field": "", "message": "must be an object"}]})
        policy = body.get("policy") if isinstance(body.get("policy"), dict) else {}
        limit = settings.PLACEMENT_API_MAX_TIME_S
        asked = policy.get("time_limit_s")
        if isinstance(asked, int | float) and asked > limit:
            raise ValidationError(
                {"errors": [{"field": "policy.time_limit_s",
                             "message": f"at most {limit:g} s over the API"}]}
            )  # fmt: skip
        try:
            return Response(solve(body))
        except PlacementInputError as invalid:
            raise ValidationError({"errors": invalid.as_dicts()}) from None
