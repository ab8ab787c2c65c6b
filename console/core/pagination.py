"""Every list is paged, never cut short: pages through Django's Paginator and the one include,
templates/console/pagination.html; the API through DRF's page-number pagination."""

from django.core.paginator import Page, Paginator
from rest_framework.pagination import PageNumberPagination

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


class ListPagination(PageNumberPagination):
    """Answers count, next, previous and results; ?page=N, and ?page_size= up to the max."""

    page_size = PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE


def page_of(request, rows) -> Page:
    """The page asked for with ?page=; a page past the end or not a number shows the nearest."""
    return Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
