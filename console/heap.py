"""A web worker's heap, settled once it has started.

What the worker loaded to serve (Django, the apps, the URLconf and every view) goes into the
garbage collector's permanent generation. A page that builds tens of thousands of objects
(the fleet board's card for each of 8,000 cards, a host's week of engine minutes) sets off a
full collection, and a full collection walks every object the process holds: about 170,000
after start, 50-90 ms of a busy core, about once a request (measured with the 1,000-host
bench, docs/benchmarks.md). Frozen, those are never walked again; only what came since is.
"""

import gc

from django.urls import get_resolver


def settle() -> None:
    """Load every view now, drop the start's garbage, freeze the rest (call once, at start)."""
    get_resolver().url_patterns  # noqa: B018 - imports the URLconf and the views it names
    gc.collect()
    gc.freeze()
