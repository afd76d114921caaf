from django.apps import AppConfig


class EvaluationsConfig(AppConfig):
    name = "evaluations"

    def ready(self) -> None:
        from evaluations.permissions import agent_may_fetch
        from hub.access import allow_agent_fetch

        # An agent fetches the (private) files of the jobs its host runs.
        allow_agent_fetch(agent_may_fetch)
