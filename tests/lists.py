"""What every paged list's tests share: the Next link as a browser would follow it."""

import html
import re

from rest_framework.test import APIClient

from tests.tokens import token_for

NEXT = re.compile(r'<a href="([^"]*)" rel="next">')


def next_link(response) -> str:
    """The query string of the page's Next link, unescaped ("?status=x&page=2")."""
    found = NEXT.search(response.content.decode())
    assert found, "the page has no Next link"
    return html.unescape(found.group(1))


def api_page(client, path, params=None) -> dict:
    response = client.get(path, params or {})
    assert response.status_code == 200, response.content
    answer = response.json()
    assert set(answer) == {"count", "next", "previous", "results"}
    return answer


def token_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
    return client
