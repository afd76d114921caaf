"""The browser's forms. They only read and check the request; the actions do the work."""

from __future__ import annotations

import dataclasses
from typing import Any

from django import forms
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.forms.forms import DeclarativeFieldsMetaclass

from hub.models import SCOPES
from predictors.protocol import CPU, GPU, OPTION_GROUPS, JobOptions, describe, inert, parse_share

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
        strip=False,
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
        # Browsers send a textarea's line breaks as CRLF (HTML's form encoding); the YAML is
        # stored as the person wrote it.
        data["manifest"] = (data.get("manifest") or "").replace("\r\n", "\n")
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


class ShareField(forms.CharField):
    """A share as a person writes it, 2% or 0.02, as the API's number (its range is the API's
    to check); None where empty."""

    def to_python(self, value: Any) -> float | None:  # type: ignore[override]
        text = str(super().to_python(value) or "").strip()
        if not text:
            return None
        try:
            return parse_share(text)
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None


def _quoted(name: str) -> str:
    """How a job option's help names another: by its label."""
    return f"“{JobOptions.__dataclass_fields__[name].metadata['label']}”"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def shown(name: str, value: Any) -> Any:
    """Job option `name`'s `value` as its field shows it: a list as its items, comma-separated
    or one per line; a number as short as it reads back."""
    meta = JobOptions.__dataclass_fields__[name].metadata
    if isinstance(value, list | tuple):
        return ("\n" if meta.get("item") == "str" else ", ").join(str(item) for item in value)
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def option_field(spec: dataclasses.Field[Any]) -> forms.Field:
    """The launch form's field for a job option (`predictors.protocol.JobOptions`): its label,
    help and default, a widget by its type. The form hands the text over; the API checks it."""
    meta, default = spec.metadata, spec.default
    label = meta["label"]
    help_text = _sentence(describe(spec, _quoted, meanings=False))
    if "unset" in meta:
        help_text += f" Empty: {meta['unset']}."
    initial = None if default in (None, ()) else shown(spec.name, default)
    if isinstance(default, bool):
        return forms.BooleanField(label=label, required=False, help_text=help_text)
    if "choices" in meta:
        meanings = meta.get("meanings") or {}
        return forms.ChoiceField(
            label=label,
            required=False,
            initial=initial,
            choices=[(c, f"{c} — {meanings[c]}" if c in meanings else c) for c in meta["choices"]],
            help_text=help_text,
        )
    widget: forms.Widget = forms.TextInput()
    if isinstance(default, tuple):
        if meta.get("item") == "str":
            help_text += " One per line."
            widget = forms.Textarea({"rows": 2, "class": "mono", "spellcheck": "false"})
        else:
            help_text += " Comma-separated, e.g. 1, 8, 32."
    elif meta.get("written") == "share":
        return ShareField(label=label, required=False, initial=initial, help_text=help_text)
    elif "minimum" in meta:
        attrs = {"min": meta["minimum"]}
        widget = forms.NumberInput({**attrs, "step": "any"} if meta.get("number") else attrs)
    return forms.CharField(
        label=label, required=False, initial=initial, widget=widget, help_text=help_text
    )


class _JobOptionFields(DeclarativeFieldsMetaclass):
    """Adds a field per job option to the launch form."""

    def __new__(mcs, name: str, bases: tuple[type, ...], attrs: dict[str, Any]) -> Any:
        for spec in dataclasses.fields(JobOptions):
            attrs.setdefault(spec.name, option_field(spec))
        return super().__new__(mcs, name, bases, attrs)


class LaunchForm(forms.Form, metaclass=_JobOptionFields):
    """What `POST /api/v1/evaluations/` takes, as HTML. The API's own serializer validates it
    (`evaluations.api.serializers.EvaluationRequestSerializer`); this form only renders the
    fields and hands their text over, so the page and the API accept exactly the same requests.
    The fields that say where it runs are written here; those of the job options are made from
    `predictors.protocol.JobOptions` (`option_field`) and shown in their groups
    (`option_groups`).
    """

    model = forms.ChoiceField(label="Model")
    model_version = forms.CharField(
        label="Model version",
        required=False,
        initial="*",
        help_text="An exact version or an npm range: 1.0.0, ^1.2, 1.x; * is the highest.",
    )
    framework = forms.ChoiceField(label="Framework")
    framework_version = forms.CharField(
        label="Framework version",
        required=False,
        help_text="An npm range the host's framework must satisfy, e.g. ^2.1; empty for any.",
    )
    dataset = forms.ChoiceField(label="Dataset")
    dataset_version = forms.CharField(label="Dataset version", required=False, initial="*")
    device = forms.ChoiceField(
        label="Device",
        choices=[(CPU, "CPU"), (GPU, "GPU (CUDA)")],
        initial=CPU,
        widget=forms.RadioSelect,
    )
    gpu_model = forms.CharField(
        label="GPU model", required=False, help_text="Part of the GPU's name, e.g. A100 or H100."
    )
    min_memory_gb = forms.CharField(
        label="Minimum memory (GiB)",
        required=False,
        widget=forms.NumberInput(attrs={"min": 0, "step": "any"}),
        help_text="Of the GPU for a GPU run, of the host for a CPU run.",
    )
    arch = forms.ChoiceField(
        label="Architecture",
        required=False,
        choices=[("", "Any"), ("amd64", "amd64"), ("arm64", "arm64"), ("ppc64le", "ppc64le")],
    )
    hosts = forms.ChoiceField(
        label="Hosts",
        choices=[("one", "One host (load-balanced)"), ("all", "Every matching host")],
        initial="one",
        widget=forms.RadioSelect,
    )
    host = forms.ChoiceField(
        label="Host",
        required=False,
        help_text="Only hosts you may use are offered: your own, your groups' and the shared "
        "pool. Any host lets the hub choose (yours first).",
    )
    # One per rendered form: the same form submitted twice (Enter pressed twice, a resubmitted
    # POST) launches once.
    nonce = forms.CharField(required=False, max_length=32, widget=forms.HiddenInput)

    def __init__(
        self,
        *args: Any,
        models: list[tuple[str, str]],
        frameworks: list[tuple[str, str]],
        datasets: list[tuple[str, str]],
        hosts: list[tuple[str, str]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["host"].choices = [("", "Any host you may use"), *(hosts or [])]  # type: ignore[attr-defined]
        self.fields["model"].choices = models  # type: ignore[attr-defined]
        self.fields["framework"].choices = frameworks  # type: ignore[attr-defined]
        self.fields["dataset"].choices = datasets  # type: ignore[attr-defined]

    @property
    def option_groups(self) -> dict[str, dict[str, Any]]:
        """The job options' fields by the group the protocol puts each in (`OPTION_GROUPS`):
        its `inputs` (shown in a row), `checks` (checkboxes) and `texts` (text areas), a
        `summary` of their labels, and whether any is `open` (in error, or other than its
        default)."""
        groups: dict[str, dict[str, Any]] = {
            name: {"inputs": [], "checks": [], "texts": [], "labels": [], "open": False}
            for name in OPTION_GROUPS
        }
        for spec in dataclasses.fields(JobOptions):
            field = self[spec.name]
            group = groups[spec.metadata["group"]]
            kind = field.widget_type
            group[{"checkbox": "checks", "textarea": "texts"}.get(kind, "inputs")].append(field)
            group["labels"].append(spec.metadata["label"])
            value = field.value()
            if field.errors or field.field.has_changed(field.field.initial, value):
                group["open"] = True
        for group in groups.values():
            labels = group.pop("labels")
            group["summary"] = ", ".join(labels[:1] + [x[:1].lower() + x[1:] for x in labels[1:]])
        return groups

    def request(self) -> dict[str, Any]:
        """The API request the fields spell: empty fields are left out, so that the API's
        defaults apply (`predictors.protocol.JOB_DEFAULTS`, the fields' initial values), and so
        is a field left as shown whose option does nothing as the others stand
        (`predictors.protocol.inert`: the warm-up of a cold start, the time bound of no
        target interval)."""
        data = self.cleaned_data
        request: dict[str, Any] = {}
        for name, value in data.items():
            if name == "nonce":
                continue
            spec = JobOptions.__dataclass_fields__.get(name)
            if spec is not None and name not in self.changed_data and inert(name, data):
                continue
            if spec is not None and isinstance(spec.default, bool):
                request[name] = bool(value)
            elif spec is not None and isinstance(spec.default, tuple):
                text = str(value or "")
                if spec.metadata.get("item") == "str":
                    items = [line.strip() for line in text.splitlines()]
                else:
                    items = [part.strip() for part in text.replace(";", ",").split(",")]
                if any(items):
                    request[name] = [item for item in items if item]
            elif value not in (None, ""):
                request[name] = value.strip() if isinstance(value, str) else value
        return request
