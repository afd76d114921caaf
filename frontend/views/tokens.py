"""The tokens page: create (the value shown once), list and revoke API tokens."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from frontend.forms import TokenForm
from hub import actions
from hub.models import ApiToken

# The new token's id and value travel from the POST to the page it redirects to in the session,
# and are removed when shown: reloading the page neither mints another token nor shows it again.
_CREATED = "frontend.created_token"


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    created = None
    form = TokenForm()
    shown = request.session.pop(_CREATED, None)
    if request.method == "GET" and isinstance(shown, dict):
        token_row = ApiToken.objects.filter(pk=shown.get("pk"), user=request.user).first()
        if token_row is not None:
            created = {"token": token_row, "raw": str(shown.get("raw", ""))}
    if request.method == "POST" and "revoke" in request.POST:
        pk = request.POST["revoke"]
        if not (pk.isascii() and pk.isdigit()):
            raise Http404("No such token.")
        token = get_object_or_404(ApiToken, pk=int(pk), user=request.user)
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
            request.session[_CREATED] = {"pk": token.pk, "raw": raw}
            return redirect("tokens")
    tokens = ApiToken.objects.filter(user=request.user)
    return render(
        request, "frontend/tokens.html", {"form": form, "tokens": tokens, "created": created}
    )
