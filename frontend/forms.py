"""The browser's forms. They only read and check the request; the actions do the work."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile

from hub.models import SCOPES


SCOPE_MEANINGS = {
    "read": "read manifests, datasets, hosts and your tokens",
    "write": "upload and delete manifests, create and revoke tokens",
    "evaluate": "launch evaluations",
    "agent": "register a host and send its heartbeats (for agents only)",
}


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100)
    # Each choice's label says what the scope allows; its value is the scope's name.
    scopes = forms.MultipleChoiceField(
        choices=[(s, SCOPE_MEANINGS.get(s, s)) for s in SCOPES],
        widget=forms.CheckboxSelectMultiple,
        initial=["read"],
    )
    expires_in_days = forms.IntegerField(
        min_value=1,
        max_value=3650,
        required=False,
        label="Expires in (days)",
        help_text="Leave empty for a token that never expires.",
    )


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Any number of files under one name (Django's documented pattern)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data: Any, initial: Any = None) -> list[UploadedFile]:
        if isinstance(data, list | tuple):
            return [super(MultipleFileField, self).clean(d, initial) for d in data if d]
        return [super().clean(data, initial)] if data else []


class UploadForm(forms.Form):
    """A manifest (pasted or as a file), the files it names, and who may see it."""

    manifest = forms.CharField(
        label="Manifest (YAML)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 24, "spellcheck": "false", "wrap": "off"}),
        help_text="Paste the manifest here, or choose its file below.",
    )
    manifest_file = forms.FileField(
        label="…or the manifest file",
        required=False,
        widget=forms.ClearableFileInput(attrs={"accept": ".yaml,.yml,text/yaml"}),
    )
    files = MultipleFileField(
        label="Model or dataset files",
        required=False,
        help_text=(
            "Each file is stored in the manifest's folder, repo://models/NAME/VERSION/FILE, "
            "and must be named by the manifest."
        ),
    )
    visibility = forms.ChoiceField(
        choices=[
            ("", "As the manifest says (private if it does not)"),
            ("private", "Private: only me and the groups I share it with"),
            ("public", "Public: everyone"),
        ],
        required=False,
    )

    def clean_manifest_file(self) -> UploadedFile | None:
        file = self.cleaned_data.get("manifest_file")
        if file is not None and file.size > settings.MANIFEST_MAX_BYTES:
            raise forms.ValidationError(
                f"The manifest is larger than the limit of {settings.MANIFEST_MAX_BYTES} bytes."
            )
        return file

    def clean_files(self) -> list[UploadedFile]:
        files: list[UploadedFile] = self.cleaned_data.get("files") or []
        seen: set[str] = set()
        for file in files:
            if file.name in seen:
                raise forms.ValidationError(f"The file '{file.name}' is chosen twice.")
            seen.add(str(file.name))
        return files

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        file = data.get("manifest_file")
        if file is not None:
            raw = file.read()
            try:
                data["manifest"] = raw.decode("utf-8-sig")
            except UnicodeDecodeError:
                self.add_error("manifest_file", "The manifest file is not UTF-8 text.")
        if not (data.get("manifest") or "").strip() and "manifest_file" not in self.errors:
            self.add_error("manifest", "Paste a manifest or choose a manifest file.")
        return data
