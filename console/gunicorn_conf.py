"""gunicorn's settings for the console's web process (`gunicorn -c python:console.gunicorn_conf`).

gunicorn writes `Server: gunicorn` into every answer itself, ahead of the application's
headers, and has no setting to leave it out; the banner only tells a scanner what to try.
The config module runs in the master before it forks its workers, so they all answer without.
"""

from gunicorn.http import wsgi

_write_default_headers = wsgi.Response.default_headers


def _default_headers_without_server(response) -> list[str]:
    return [h for h in _write_default_headers(response) if not h.startswith("Server:")]


wsgi.Response.default_headers = _default_headers_without_server
