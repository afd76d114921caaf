from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_save


class EvaluationsConfig(AppConfig):
    name = "evaluations"

    def ready(self) -> None:
        from evaluations.actions import on_agent_restarted
        from evaluations.events import on_access_withdrawn, on_spans_received
        from evaluations.permissions import agent_may_fetch
        from hub.access import allow_agent_fetch
        from hub.signals import access_withdrawn, agent_restarted
        from traces.signals import spans_received

        # An agent fetches the (private) files of the jobs its host runs.
        allow_agent_fetch(agent_may_fetch)
        # Spans of an evaluation's trace arrived: its live `spans` event.
        spans_received.connect(on_spans_received, dispatch_uid="evaluations.spans_received")
        # A host's agent started afresh: the jobs its previous process held are lost.
        agent_restarted.connect(on_agent_restarted, dispatch_uid="evaluations.agent_restarted")
        # Someone's access may have ended: their open WebSockets check it again.
        access_withdrawn.connect(on_access_withdrawn, dispatch_uid="evaluations.access_withdrawn")
        # A manifest that turns private unpublishes the evaluations of it.
        post_save.connect(
            _manifest_saved, sender="hub.Manifest", dispatch_uid="evaluations.manifest_saved"
        )


def _manifest_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if not created:
        from evaluations.sharing import unpublish_private

        unpublish_private(instance)
