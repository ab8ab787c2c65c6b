"""A web worker settles its heap at start: the views loaded, and everything frozen."""

import json
import os
import subprocess
import sys
from pathlib import Path

from console.heap import YOUNG_COLLECTION_EVERY

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json, sys
import django
django.setup()
from console.heap import settle
def state():
    return ["inventory.views.fleet" in sys.modules, gc.get_freeze_count(), gc.get_threshold()[0]]
before = state()
settle()
print(json.dumps([before, state()]))
"""


def test_settle_loads_the_views_and_freezes_what_start_made():
    # A process of its own: freezing the test run's heap would keep its garbage for good.
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
        check=True, timeout=120,
    )  # fmt: skip
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == [False, 0, 700]  # CPython's default: a young collection every 700
    loaded, frozen, young = after
    assert loaded
    assert frozen > 10_000  # Django, the apps and the views, not a handful
    assert young == YOUNG_COLLECTION_EVERY
