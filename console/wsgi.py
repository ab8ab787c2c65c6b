import os

from django.core.wsgi import get_wsgi_application

from console.heap import settle
from console.secret_key import ensure_local_key
from inventory.env import load_env_file

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
# Every web worker must sign sessions with the same key, and one that outlives it.
load_env_file()
ensure_local_key()

application = get_wsgi_application()
# Before the first request: what start loaded is never walked by the collector again.
settle()
