"""Signals other parts of the console connect to.

`alert_fired` is sent once per alert when it starts firing, after the evaluation that decided
it committed: `sender` is the AlertRule class, `alert` the Alert (its `rule.kind`, its `gpu`,
`host`, `deployment` and `values` say what crossed). Host actions can hang a degradation step
on the card memory rule here:

    @receiver(alert_fired)
    def degrade(sender, alert, **kwargs):
        if alert.rule.kind == "card_memory": ...

`alert_resolved` is sent the same way when it resolves.
"""

from django.dispatch import Signal

alert_fired = Signal()
alert_resolved = Signal()
