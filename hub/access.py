"""Access rules that apps built on the hub add to it, so that the hub depends on none of them.

An artifact is readable by whoever may read a manifest that references it. An agent's token
may also fetch the files of the jobs its host runs: the evaluations app knows which those are
and registers that rule here (`EvaluationsConfig.ready`).
"""

from __future__ import annotations

from collections.abc import Callable

from hub.models import ApiToken, Artifact

AgentFetchRule = Callable[[ApiToken, Artifact], bool]

_agent_fetch_rules: list[AgentFetchRule] = []


def allow_agent_fetch(rule: AgentFetchRule) -> AgentFetchRule:
    """Let an agent token fetch an artifact when `rule(token, artifact)` says so."""
    if rule not in _agent_fetch_rules:
        _agent_fetch_rules.append(rule)
    return rule


def agent_may_fetch(token: ApiToken, artifact: Artifact) -> bool:
    """Whether a registered rule lets agent `token` fetch `artifact`."""
    return any(rule(token, artifact) for rule in _agent_fetch_rules)
