"""A web worker's heap, settled once it has started.

What the worker loaded to serve (Django, the apps, the URLconf and every view) goes into the
garbage collector's permanent generation. A page that builds tens of thousands of objects
(the fleet board's card for each of 8,000 cards, a host's week of engine minutes) sets off a
full collection, and a full collection walks every object the process holds: about 170,000
after start, 50-90 ms of a busy core, about once a request (measured with the 1,000-host
bench, docs/benchmarks.md). Frozen, those are never walked again; only what came since is.

The young generation is collected every 20,000 new objects instead of every 700: at 700 such
a page ran some 140 young and 14 middle collections, each walking the lists it was still
building (10-15 ms of the analyses fragment's 100).
"""

import gc

from django.urls import get_resolver

YOUNG_COLLECTION_EVERY = 20_000


def settle() -> None:
    """Load every view now, drop the start's garbage, freeze the rest (call once, at start)."""
    get_resolver().url_patterns  # noqa: B018 - imports the URLconf and the views it names
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)
