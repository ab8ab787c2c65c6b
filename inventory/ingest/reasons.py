"""Why ingest refused a batch, in the reader's language.

The catalogue is inventory.telemetry's (plain strings: the agent's install carries no console
and no Django); registered here as reason codes, a dead letter's stored reason renders as any
other does.
"""

from inventory.analytics.reasons import register
from inventory.wire.schema import MESSAGES as REJECTIONS
from inventory.wire.schema import REASON_PREFIX

MESSAGES = register({REASON_PREFIX + key: template for key, template in REJECTIONS.items()})
