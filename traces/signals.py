"""What the traces app tells the apps built on it.

`spans_received(sender=Trace, evaluation=…, levels={level: count})`: an export's spans of an
evaluation's trace were stored (sent inside the storing transaction: a receiver that tells
the world waits for the commit). The evaluations app sends its live `spans` event on it
(`EvaluationsConfig.ready`).
"""

from __future__ import annotations

from django.dispatch import Signal

spans_received = Signal()
