"""Every list is paged, never cut short: pages through Django's Paginator and the one include,
templates/console/pagination.html; the API through DRF's page-number pagination."""

from django.core.paginator import Page, Paginator
from django.utils.translation import gettext as _
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


class ListPagination(PageNumberPagination):
    """Answers count, next, previous and results; ?page=N, and ?page_size= from 1 to the max.

    A page_size that is no such number (null, 0, 10000) is refused, as the schema says, where
    DRF would quietly answer the default page."""

    page_size = PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request):
        asked = request.query_params.get(self.page_size_query_param)
        if asked is None:
            return self.page_size
        # The length first: int() of thousands of digits raises ValueError.
        digits = asked.isascii() and asked.isdigit() and len(asked) <= len(str(MAX_PAGE_SIZE))
        if not digits or not 1 <= int(asked) <= MAX_PAGE_SIZE:
            raise ValidationError(
                {self.page_size_query_param: _("A whole number from 1 to %(most)d.")
                 % {"most": MAX_PAGE_SIZE}}
            )  # fmt: skip
        return int(asked)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update(minimum=1, maximum=MAX_PAGE_SIZE)
        return parameters


def page_of(request, rows) -> Page:
    """The page asked for with ?page=; a page past the end or not a number shows the nearest."""
    return Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
