"""Publishing and sharing evaluations.

An evaluation is private to its owner until they publish it or share it with a group:

- **publish**: anyone, signed in or not, may then read it, and it joins the leaderboards. Only
  a succeeded evaluation whose model and dataset are public can be published; one of a private
  model or dataset never can, and a manifest that turns private unpublishes the evaluations of
  it (`unpublish_private`, on every save of a manifest).
- **share** with one of the owner's groups: its members may read it. The model and dataset must
  be public or shared with that group too, so that sharing a result never reveals a private
  manifest to someone it was not shared with.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import transaction
from django.utils import timezone

from evaluations import events, leaderboards
from evaluations.error_codes import EvaluationErrorCode
from evaluations.models import Evaluation
from hub import groups
from hub.error_codes import HubErrorCode
from hub.errors import Forbidden, Invalid, NotFound
from hub.models import Manifest


def _owned(user: AbstractBaseUser, evaluation_id: Any, what: str) -> Evaluation:
    evaluation = (
        Evaluation.objects.select_for_update(of=("self",))
        .select_related("model", "dataset")
        .filter(pk=evaluation_id)
        .first()
    )
    if (
        evaluation is None
        or not Evaluation.objects.visible_to(user).filter(pk=evaluation_id).exists()
    ):
        raise NotFound(f"no evaluation {evaluation_id}", path="")
    if evaluation.user_id != user.pk and not user.is_staff:
        raise Forbidden(f"only the evaluation's owner can {what} it", code=HubErrorCode.NOT_OWNER)
    return evaluation


def publication_refusal(evaluation: Evaluation) -> str | None:
    """Why `evaluation` cannot be published, or None when it can."""
    if evaluation.status != Evaluation.SUCCEEDED:
        return f"only a succeeded evaluation can be published; this one is {evaluation.status}"
    for kind, manifest, name in (
        ("model", evaluation.model, evaluation.model_name),
        ("dataset", evaluation.dataset, evaluation.dataset_name),
    ):
        if manifest is None:
            return f"its {kind} '{name}' was deleted: nobody could reproduce it"
        if manifest.visibility != Manifest.PUBLIC:
            return (
                f"its {kind} '{name}' is private: an evaluation of a private {kind} can never "
                f"be published"
            )
    return None


def publish(user: AbstractBaseUser, evaluation_id: Any) -> Evaluation:
    with transaction.atomic():
        evaluation = _owned(user, evaluation_id, "publish")
        why = publication_refusal(evaluation)
        if why is not None:
            raise Invalid(why, path="", code=EvaluationErrorCode.NOT_PUBLISHABLE)
        if not evaluation.published:
            evaluation.published = True
            evaluation.published_at = timezone.now()
            evaluation.save(update_fields=["published", "published_at", "updated_at"])
            leaderboards.recount(evaluation.result.configuration)
    return evaluation


def unpublish(user: AbstractBaseUser, evaluation_id: Any) -> Evaluation:
    with transaction.atomic():
        evaluation = _owned(user, evaluation_id, "unpublish")
        if evaluation.published:
            evaluation.published = False
            evaluation.published_at = None
            evaluation.save(update_fields=["published", "published_at", "updated_at"])
            result = getattr(evaluation, "result", None)
            if result is not None:
                leaderboards.recount(result.configuration)
            events.access_withdrawn(evaluations=[evaluation.pk])
    return evaluation


def share(user: AbstractBaseUser, evaluation_id: Any, group_name: str) -> Group:
    with transaction.atomic():
        evaluation = _owned(user, evaluation_id, "share")
        group = groups.member_group(user, group_name)
        for kind, manifest, name in (
            ("model", evaluation.model, evaluation.model_name),
            ("dataset", evaluation.dataset, evaluation.dataset_name),
        ):
            if not groups.visible_to_group(manifest, group):
                raise Invalid(
                    f"its {kind} '{name}' is private and not shared with '{group.name}': share "
                    f"the {kind} with the group first",
                    path="group",
                    code=EvaluationErrorCode.NOT_SHAREABLE,
                )
        evaluation.shared_groups.add(group)
    return group


def unshare(user: AbstractBaseUser, evaluation_id: Any, group_name: str) -> None:
    with transaction.atomic():
        evaluation = _owned(user, evaluation_id, "unshare")
        group = evaluation.shared_groups.filter(name=str(group_name)[:150]).first()
        if group is None:
            raise NotFound(
                f"the evaluation is not shared with '{str(group_name)[:64]}'", path="group"
            )
        evaluation.shared_groups.remove(group)
        events.access_withdrawn(evaluations=[evaluation.pk])


def shared_with(user: AbstractBaseUser, evaluation: Evaluation) -> list[str]:
    """The names of the groups `evaluation` is shared with that `user` may know of: all of them
    for its owner and staff, else the user's own groups among them."""
    names = evaluation.shared_groups.all()
    if evaluation.user_id != user.pk and not user.is_staff:
        names = names.filter(user=user)
    return sorted(names.values_list("name", flat=True))


def unpublish_private(manifest: Manifest) -> int:
    """Unpublish the evaluations of `manifest` when it is not public (any more): a private
    model's or dataset's results never stay public. Returns how many it unpublished."""
    if manifest.visibility == Manifest.PUBLIC:
        return 0
    field = "model" if manifest.kind == Manifest.MODEL else "dataset"
    affected = list(
        Evaluation.objects.filter(**{field: manifest}, published=True).select_related("result")
    )
    if not affected:
        return 0
    Evaluation.objects.filter(pk__in=[e.pk for e in affected]).update(
        published=False, published_at=None, updated_at=timezone.now()
    )
    for configuration in {e.result.configuration for e in affected if hasattr(e, "result")}:
        leaderboards.recount(configuration)
    events.access_withdrawn(evaluations=[e.pk for e in affected])
    return len(affected)
