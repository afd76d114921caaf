"""Browser pages. They call the same actions as the API."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from hub import actions
from hub.models import SCOPES, ApiToken, Host, Manifest


def home(request: HttpRequest) -> HttpResponse:
    manifests = Manifest.objects.visible_to(request.user).order_by("kind", "name", "framework")
    return render(
        request,
        "frontend/home.html",
        {"manifests": manifests, "hosts": Host.objects.live().count()},
    )


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100)
    scopes = forms.MultipleChoiceField(
        choices=[(s, s) for s in SCOPES], widget=forms.CheckboxSelectMultiple, initial=["read"]
    )
    expires_in_days = forms.IntegerField(
        min_value=1, max_value=3650, required=False, label="Expires in (days)"
    )


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    created = None
    form = TokenForm()
    if request.method == "POST" and "revoke" in request.POST:
        token = get_object_or_404(ApiToken, pk=request.POST.get("revoke"), user=request.user)
        actions.revoke_token(token)
    elif request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            token, raw = ApiToken.issue(
                request.user,  # type: ignore[arg-type]
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                expires_in_days=form.cleaned_data["expires_in_days"],
            )
            created = {"token": token, "raw": raw}
            form = TokenForm()
    tokens = ApiToken.objects.filter(user=request.user)
    return render(
        request, "frontend/tokens.html", {"form": form, "tokens": tokens, "created": created}
    )
