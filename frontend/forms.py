"""The browser's forms. They only read and check the request; the actions do the work."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile

from hub.models import SCOPES
from predictors.protocol import JOB_DEFAULTS, parse_share

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


class LaunchForm(forms.Form):
    """What `POST /api/v1/evaluations/` takes, as HTML. The API's own serializer validates it
    (`evaluations.api.serializers.EvaluationRequestSerializer`); this form only renders the
    fields and hands their text over, so the page and the API accept exactly the same requests.
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
    split = forms.CharField(label="Split", required=False, initial=JOB_DEFAULTS["split"])
    limit = forms.CharField(
        label="Limit",
        required=False,
        widget=forms.NumberInput(attrs={"min": 1}),
        help_text="Evaluate the first N inputs only; empty for the whole split.",
    )
    device = forms.ChoiceField(
        label="Device",
        choices=[("cpu", "CPU"), ("gpu", "GPU (CUDA)")],
        initial="cpu",
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
    batch_sizes = forms.CharField(
        label="Batch sizes",
        initial=", ".join(str(size) for size in JOB_DEFAULTS["batch_sizes"]),
        required=False,
        help_text="Comma-separated, e.g. 1, 8, 32: the inputs are run at each.",
    )
    trace_level = forms.ChoiceField(label="Trace level", initial=JOB_DEFAULTS["trace_level"])
    warmup = forms.CharField(
        label="Warm-up batches",
        required=False,
        initial=str(JOB_DEFAULTS["warmup"]),
        widget=forms.NumberInput({"min": 0}),
        help_text="0 with a cold start.",
    )
    repeat = forms.CharField(
        label="Repetitions",
        required=False,
        initial=str(JOB_DEFAULTS["repeat"]),
        widget=forms.NumberInput({"min": 1}),
    )
    seed = forms.CharField(
        label="Seed",
        required=False,
        initial=str(JOB_DEFAULTS["seed"]),
        widget=forms.NumberInput({"min": 0}),
    )
    target_ci = forms.CharField(
        label="Target interval",
        required=False,
        help_text="Past the repetitions, time each batch size until the median's 95 % "
        "interval is within ± this share of it: 2% or 0.02. Empty: the repetitions only.",
    )
    target_ci_seconds = forms.CharField(
        label="Time bound (s)",
        required=False,
        initial=f"{JOB_DEFAULTS['target_ci_seconds']:g}",
        widget=forms.NumberInput({"min": 0.1, "step": "any"}),
        help_text="With a target interval: the longest a batch size is timed for it.",
    )
    threads = forms.CharField(
        label="Threads",
        required=False,
        widget=forms.NumberInput({"min": 1}),
        help_text="Intra-op threads of the framework; empty for its default.",
    )
    cold_start = forms.BooleanField(
        label="Cold start: time the first predictions, with no warm-up", required=False
    )
    allow_label_mismatch = forms.BooleanField(
        label="Run even if the model's labels are not the dataset's",
        required=False,
        help_text="A trained model on a dataset with other labels scores unrelated class "
        "indices, so it is refused unless this is checked; the result then shows the mismatch.",
    )
    latency_only = forms.BooleanField(
        label="Latency only: time the model without scoring it",
        required=False,
        help_text="No labels are read and no accuracy is reported: for models whose outputs "
        "have no labels (embeddings), tasks that are not scored, and datasets of any task. "
        "The result is kept off the accuracy leaderboards.",
    )
    scenario = forms.ChoiceField(
        label="Scenario",
        initial=JOB_DEFAULTS["scenario"],
        required=False,
        choices=[
            ("fixed", "Fixed batches only"),
            ("single_stream", "SingleStream"),
            ("multi_stream", "MultiStream"),
            ("server", "Server"),
            ("offline", "Offline"),
        ],
        help_text="How LoadGen drives the model after the fixed batches.",
    )
    loadgen_mode = forms.ChoiceField(
        label="LoadGen mode",
        initial=JOB_DEFAULTS["loadgen_mode"],
        required=False,
        choices=[("performance", "Performance"), ("accuracy", "Accuracy (every sample once)")],
    )
    target_qps = forms.CharField(
        label="Target QPS",
        required=False,
        widget=forms.NumberInput(attrs={"min": 0.01, "step": "any"}),
        help_text="Server (required unless searching): queries per second; Offline: expected.",
    )
    latency_bound_ms = forms.CharField(
        label="Latency bound (ms)",
        required=False,
        widget=forms.NumberInput(attrs={"min": 0.01, "step": "any"}),
        help_text="Server: the p99 must stay under it.",
    )
    samples_per_query = forms.CharField(
        label="Samples per query",
        required=False,
        widget=forms.NumberInput({"min": 1}),
        help_text="MultiStream (default 8).",
    )
    min_duration_ms = forms.CharField(
        label="Minimum duration (ms)", required=False,
        initial=str(JOB_DEFAULTS["min_duration_ms"]), widget=forms.NumberInput({"min": 100}),
    )  # fmt: skip
    min_query_count = forms.CharField(
        label="Minimum queries", required=False,
        initial=str(JOB_DEFAULTS["min_query_count"]), widget=forms.NumberInput({"min": 1}),
    )  # fmt: skip
    find_peak_qps = forms.BooleanField(
        label="Search for the highest QPS LoadGen judges VALID under the bound (Server)",
        required=False,
    )
    overrides = forms.CharField(
        label="Processing overrides",
        required=False,
        widget=forms.Textarea({"rows": 2, "class": "mono", "spellcheck": "false"}),
        help_text="Manifest parameters to override, PATH=VALUE, one per line "
        "(inputs.0.parameters.color_mode=BGR); checked against the manifest like an upload.",
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
        trace_levels: list[tuple[str, str]],
        hosts: list[tuple[str, str]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["host"].choices = [("", "Any host you may use"), *(hosts or [])]  # type: ignore[attr-defined]
        self.fields["model"].choices = models  # type: ignore[attr-defined]
        self.fields["framework"].choices = frameworks  # type: ignore[attr-defined]
        self.fields["dataset"].choices = datasets  # type: ignore[attr-defined]
        self.fields["trace_level"].choices = trace_levels  # type: ignore[attr-defined]

    def clean_target_ci(self) -> str | float:
        """A share as written, 2% or 0.02, as the API's number (its range is the API's to
        check); empty for none."""
        text = str(self.cleaned_data.get("target_ci") or "").strip()
        if not text:
            return ""
        try:
            return parse_share(text)
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None

    def request(self) -> dict[str, Any]:
        """The API request the fields spell: empty fields are left out, so that the API's
        defaults apply (`predictors.protocol.JOB_DEFAULTS`, the fields' initial values)."""
        data = self.cleaned_data
        request: dict[str, Any] = {}
        for name, value in data.items():
            if name == "nonce":
                continue
            if name == "warmup" and data.get("cold_start") and "warmup" not in self.changed_data:
                continue  # left as shown: a cold start's warm-up is none
            if name == "target_ci_seconds" and not data.get("target_ci"):
                if "target_ci_seconds" not in self.changed_data:
                    continue  # left as shown, and nothing to bound
            if name in ("cold_start", "allow_label_mismatch", "latency_only"):
                request[name] = bool(value)
            elif name == "find_peak_qps":
                if value:  # left out unchecked: it applies to the server scenario alone
                    request[name] = True
            elif name == "overrides":
                lines = [line.strip() for line in str(value or "").splitlines()]
                if any(lines):
                    request[name] = [line for line in lines if line]
            elif name == "batch_sizes":
                sizes = [part.strip() for part in str(value or "").replace(";", ",").split(",")]
                if any(sizes):
                    request[name] = [s for s in sizes if s]
            elif value not in (None, ""):
                request[name] = value.strip() if isinstance(value, str) else value
        return request
