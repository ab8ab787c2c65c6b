import logging

from celery import current_app as app
from django.core.management.base import BaseCommand
from kombu import Connection

from inventory.ingest.worker import GROUP, GROUP_WAIT_S, IngestWorker, freeze_what_started


class Command(BaseCommand):
    help = "Write the batches that host agents publish to the ingest queue."

    def add_arguments(self, parser):
        parser.add_argument("--max-group", type=int, default=GROUP)
        parser.add_argument("--max-wait", type=float, default=GROUP_WAIT_S, help="seconds")

    def handle(self, *args, max_group, max_wait, **options):
        logging.getLogger("inventory").setLevel(logging.INFO)
        with Connection(
            app.conf.broker_url, transport_options=app.conf.broker_transport_options
        ) as connection:
            worker = IngestWorker(connection, max_group=max_group, max_wait_s=max_wait)
            freeze_what_started()
            self.stdout.write(f"ingest worker: groups of up to {max_group}, {max_wait} s")
            worker.run(safety_interval=min(1.0, max_wait))
