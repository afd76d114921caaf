"""The groups pages: create a group, answer invitations, invite and remove members, choose
whether a group's hosts run your jobs (`hub.groups`)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from hub import groups
from hub.errors import DomainError, NotFound
from hub.models import Host


@login_required
def group_list(request: HttpRequest) -> HttpResponse:
    error = ""
    name = description = ""
    if request.method == "POST":
        try:
            if "accept" in request.POST:
                invitation = groups.invitation_for(request.user, str(request.POST["accept"]))
                joined = groups.accept_invitation(invitation)
                messages.success(request, f"You joined '{joined.name}'.")
                return redirect("group", name=joined.name)
            if "decline" in request.POST:
                invitation = groups.invitation_for(request.user, str(request.POST["decline"]))
                groups.decline_invitation(invitation)
                messages.success(
                    request, f"You declined the invitation to '{invitation.group.name}'."
                )
                return redirect("groups")
            name = str(request.POST.get("name", "")).strip()
            description = str(request.POST.get("description", "")).strip()
            group = groups.create_group(request.user, name, description)  # type: ignore[arg-type]
        except DomainError as problem:
            error = problem.message
        else:
            messages.success(request, f"Group '{group.name}' created.")
            return redirect("group", name=group.name)
    items = groups.groups_of(request.user).prefetch_related("user_set")
    return render(
        request,
        "frontend/groups.html",
        {
            "groups": items,
            "invitations": groups.invitations_of(request.user),
            "error": error,
            "name": name,
            "description": description,
        },
        status=400 if error else 200,
    )


@login_required
def group(request: HttpRequest, name: str) -> HttpResponse:
    try:
        item = groups.member_group(request.user, name)
    except NotFound as problem:
        raise Http404(problem.message) from None
    error = ""
    user = request.user
    if request.method == "POST":
        try:
            if "invite" in request.POST:
                invitation = groups.invite(
                    user,  # type: ignore[arg-type]
                    item,
                    str(request.POST.get("username", "")).strip(),
                )
                messages.success(
                    request,
                    f"{invitation.invitee.get_username()} is invited: they become a member "
                    "once they accept.",
                )
            elif "withdraw" in request.POST:
                groups.withdraw_invitation(user, item, str(request.POST["withdraw"]))  # type: ignore[arg-type]
                messages.success(
                    request, f"The invitation of {request.POST['withdraw']} is withdrawn."
                )
            elif "trust" in request.POST:
                trusted = request.POST["trust"] == "on"
                groups.set_trust(user, item, trusted)  # type: ignore[arg-type]
                messages.success(
                    request,
                    f"The hosts of '{item.name}' now run your jobs unasked."
                    if trusted
                    else f"The hosts of '{item.name}' run your jobs only when you name one.",
                )
            elif "remove" in request.POST:
                groups.remove_member(user, item, str(request.POST["remove"]))  # type: ignore[arg-type]
                if str(request.POST["remove"]) == user.get_username():
                    messages.success(request, f"You left '{item.name}'.")
                    return redirect("groups")
                messages.success(request, f"{request.POST['remove']} removed.")
            elif "delete" in request.POST:
                groups.delete_group(user, item)  # type: ignore[arg-type]
                messages.success(request, f"Group '{name}' deleted.")
                return redirect("groups")
        except DomainError as problem:
            error = problem.message
        else:
            return redirect("group", name=item.name)
    profile = item.profile  # type: ignore[attr-defined]
    return render(
        request,
        "frontend/group.html",
        {
            "group": item,
            "profile": profile,
            "members": item.user_set.order_by("username"),  # type: ignore[attr-defined]
            "invited": groups.pending_invitees(item),
            "is_owner": profile.owner_id == user.pk or user.is_staff,
            "is_member": groups.is_member(user, item),
            "trusts_hosts": groups.trusts_hosts(user, item),
            "hosts": Host.objects.filter(group=item).select_related("owner").order_by("name"),
            "error": error,
            "shared_manifests": item.shared_manifests.order_by("kind", "name", "version"),  # type: ignore[attr-defined]
            "shared_evaluations": item.shared_evaluations.select_related("user")[:200],  # type: ignore[attr-defined]
        },
        status=400 if error else 200,
    )
