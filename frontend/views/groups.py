"""The groups pages: create a group, add and remove members (`hub.groups`)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from hub import groups
from hub.errors import DomainError, NotFound


@login_required
def group_list(request: HttpRequest) -> HttpResponse:
    error = ""
    name = description = ""
    if request.method == "POST":
        name = str(request.POST.get("name", "")).strip()
        description = str(request.POST.get("description", "")).strip()
        try:
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
        {"groups": items, "error": error, "name": name, "description": description},
        status=400 if error else 200,
    )


@login_required
def group(request: HttpRequest, name: str) -> HttpResponse:
    try:
        item = groups.member_group(request.user, name)
    except NotFound as problem:
        raise Http404(problem.message) from None
    error = ""
    if request.method == "POST":
        try:
            if "add" in request.POST:
                member = groups.add_member(
                    request.user,  # type: ignore[arg-type]
                    item,
                    str(request.POST.get("username", "")).strip(),
                )
                messages.success(request, f"{member.get_username()} added.")
            elif "remove" in request.POST:
                groups.remove_member(request.user, item, str(request.POST["remove"]))  # type: ignore[arg-type]
                if str(request.POST["remove"]) == request.user.get_username():
                    messages.success(request, f"You left '{item.name}'.")
                    return redirect("groups")
                messages.success(request, f"{request.POST['remove']} removed.")
            elif "delete" in request.POST:
                groups.delete_group(request.user, item)  # type: ignore[arg-type]
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
            "is_owner": profile.owner_id == request.user.pk or request.user.is_staff,
            "error": error,
            "shared_manifests": item.shared_manifests.order_by("kind", "name", "version"),  # type: ignore[attr-defined]
            "shared_evaluations": item.shared_evaluations.select_related("user")[:200],  # type: ignore[attr-defined]
        },
        status=400 if error else 200,
    )
