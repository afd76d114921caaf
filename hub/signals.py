"""What the hub tells the apps built on it (it imports none of them).

- `agent_restarted(sender=Host, host=…)`: a host's agent registered from a new process (its
  `instance` changed), so the process before it ended, and whatever jobs it held are lost. Sent
  inside the registering transaction. The evaluations app dispatches those jobs again at once
  (`EvaluationsConfig.ready`).
- `access_withdrawn(sender=…, users=[ids], tokens=[ids], evaluations=[ids])`: someone's access
  to something may have ended (a group left or a member removed, a token revoked, an evaluation
  unshared or unpublished). Sent inside the changing transaction; the evaluations app tells
  the WebSockets concerned, after commit, to check their access again.
"""

from __future__ import annotations

from django.dispatch import Signal

agent_restarted = Signal()
access_withdrawn = Signal()
