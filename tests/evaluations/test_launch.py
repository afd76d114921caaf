"""`POST /api/v1/evaluations/`: a request is validated field by field, solved against the live
hosts (model, framework and hardware constraints) and dispatched by task name to a queue."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from evaluations.models import Evaluation, StatusChange
from hub.models import Host
from predictors.protocol import TASK_NAME
from tests.evaluations.factories import EVALUATIONS_URL, error_paths, launch

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model", "Not A Name"),
        ("model_version", "^^1"),
        ("framework", "caffe"),
        ("framework_version", "1.2.3.4"),
        ("dataset", ""),
        ("dataset_version", "1.0.0 -"),
        ("split", "../etc"),
        ("limit", 0),
        ("device", "tpu"),
        ("gpu_model", "x" * 200),
        ("min_memory_gb", -1),
        ("arch", "AMD 64"),
        ("hosts", "some"),
        ("batch_sizes", []),
        ("batch_sizes", [1, 0]),
        ("batch_sizes", [8, 8]),
        ("batch_sizes", "1,32"),
        ("warmup", -1),
        ("repeat", 0),
        ("seed", "lucky"),
        ("cold_start", "maybe"),
        ("threads", 0),
        ("trace_level", "everything"),
        ("batch_size", 32),  # a typo of batch_sizes is refused, not ignored
        ("scenario", "burst"),
        ("target_qps", True),  # a boolean is no rate
        ("target_qps", "fast"),
        ("target_qps", 0),
        ("latency_bound_ms", -5),
        ("min_duration_ms", 50),
        ("min_query_count", 0),
        ("loadgen_mode", "both"),
        ("find_peak_qps", "maybe"),
        ("target_qps", 10),  # with scenario fixed: it would do nothing
        ("min_duration_ms", 5000),  # likewise
    ],
)
def test_an_invalid_field_is_refused_with_400_naming_it(
    alice_evaluator_client, hosts, field, value
) -> None:
    response = launch(alice_evaluator_client, **{field: value})

    assert response.status_code == 400, response.content
    assert error_paths(response)[0].split(".")[0] == field
    assert Evaluation.objects.count() == 0


def test_a_missing_required_field_is_named(alice_evaluator_client, hosts) -> None:
    response = alice_evaluator_client.post(EVALUATIONS_URL, {"model": "m"}, format="json")

    assert response.status_code == 400
    assert set(error_paths(response)) == {"framework", "dataset"}


def test_gpu_model_needs_device_gpu(alice_evaluator_client, hosts) -> None:
    response = launch(alice_evaluator_client, gpu_model="A100")

    assert response.status_code == 400
    assert error_paths(response) == ["gpu_model"]


def test_a_cold_start_runs_no_warmup(alice_evaluator_client, hosts) -> None:
    assert error_paths(launch(alice_evaluator_client, cold_start=True, warmup=3)) == ["warmup"]

    response = launch(alice_evaluator_client, cold_start=True)

    assert response.status_code == 201
    assert response.json()["evaluations"][0]["request"]["warmup"] == 0


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"model_version": "^2"}, "model_version"),
        ({"framework": "pytorch"}, "framework"),
        ({"framework_version": ">=1.19"}, "framework_version"),
        ({"device": "gpu", "framework_version": "~1.17"}, "device"),
        ({"arch": "riscv64"}, "arch"),
        ({"device": "gpu", "gpu_model": "H100"}, "gpu_model"),
        ({"device": "gpu", "min_memory_gb": 80}, "min_memory_gb"),
        ({"min_memory_gb": 128}, "min_memory_gb"),
        ({"dataset_version": "^2"}, "dataset_version"),
        ({"split": "test"}, "split"),
    ],
)
def test_an_impossible_request_is_refused_with_400_naming_the_unmet_constraint(
    alice_evaluator_client, hosts, fields, path
) -> None:
    response = launch(alice_evaluator_client, **fields)

    assert response.status_code == 400, response.content
    assert error_paths(response) == [path]
    assert Evaluation.objects.count() == 0


def test_without_a_live_host_the_request_is_refused_naming_hosts(
    alice_evaluator_client, hosts
) -> None:
    Host.objects.update(last_heartbeat=timezone.now() - timedelta(hours=1))

    response = launch(alice_evaluator_client)

    assert response.status_code == 400
    assert error_paths(response) == ["hosts"]
    assert "mlms agent" in response.json()["detail"]


def test_a_model_of_another_task_than_the_dataset_is_refused(
    bob_client, alice_evaluator_client, hosts
):  # type: ignore[no-untyped-def]
    from tests.hub.factories import dataset_manifest, to_yaml, upload

    other = dataset_manifest("boxes", visibility="public")
    other["task"] = "object_detection"
    assert upload(bob_client, to_yaml(other)).status_code == 201

    response = launch(alice_evaluator_client, dataset="boxes")

    assert response.status_code == 400
    assert error_paths(response) == ["dataset"]


def test_a_model_whose_labels_are_not_the_datasets_is_refused_naming_both(  # type: ignore[no-untyped-def]
    bob_client, alice_evaluator_client, agent, hosts
):
    """Accuracy compares class indices: other labels, or the same ones in another order, are
    refused with a 400 naming both sets, unless the request allows it."""
    from tests.evaluations.factories import claim, launched_id
    from tests.helpers import error_of
    from tests.hub.factories import dataset_manifest, model_manifest, to_yaml, upload

    birds = dataset_manifest("birds", visibility="public")
    birds["labels"] = ["sparrow", "robin", "cat"]
    swapped = dataset_manifest("swapped", visibility="public")
    swapped["labels"] = ["dog", "cat"]
    from_file = dataset_manifest("from-file", visibility="public")
    del from_file["labels"]
    from_file["labels_path"] = "repo://datasets/from-file/1.0.0/labels.txt"
    for manifest, files in ((birds, None), (swapped, None), (from_file, {"labels.txt": b"ox\n"})):
        response = upload(bob_client, to_yaml(manifest), files)
        assert response.status_code == 201, response.content

    for dataset, shown, why in (
        ("birds", "3 labels [sparrow, robin, cat]", "1 only the model's (e.g. dog)"),
        ("swapped", "2 labels [dog, cat]", "the same labels in another order"),
        ("from-file", "1 label [ox]", "2 only the model's (e.g. cat, dog)"),
    ):
        refused = launch(alice_evaluator_client, dataset=dataset)
        assert refused.status_code == 400, refused.content
        assert refused.json()["code"] == "label_mismatch"
        error = error_of(refused)
        assert error_paths(refused) == ["dataset"]
        assert "model m 1.1.0 has 2 labels [cat, dog]" in error["message"]
        assert f"dataset {dataset} 1.0.0 has {shown}" in error["message"]
        assert why in error["message"]
        assert "allow_label_mismatch" in error["message"]
    assert Evaluation.objects.count() == 0

    # An override that gives the model the dataset's labels makes the launch valid ...
    fixed = launch(
        alice_evaluator_client,
        dataset="swapped",
        overrides=['outputs.0.parameters.labels=["dog", "cat"]'],
    )
    assert fixed.status_code == 201, fixed.content
    # ... and so does allowing the mismatch, which the job carries to the agent.
    allowed = launch(alice_evaluator_client, dataset="birds", allow_label_mismatch=True)
    job = claim(agent, launched_id(allowed), hosts["cpu-1"]).json()
    assert job["options"]["allow_label_mismatch"] is True
    # A model marked untrained has no accuracy to protect.
    untrained = model_manifest("random", visibility="public")
    untrained["attributes"] = {"trained": False}
    assert upload(bob_client, to_yaml(untrained)).status_code == 201
    seeded = launch(alice_evaluator_client, model="random", dataset="birds")
    assert seeded.status_code == 201, seeded.content
    # ... and every answer that shows its evaluation marks it.
    (shown,) = seeded.json()["evaluations"]
    assert shown["untrained"] is True
    assert allowed.json()["evaluations"][0]["untrained"] is False
    marked = alice_evaluator_client.get(EVALUATIONS_URL, {"untrained": "true"}).json()["results"]
    assert [e["id"] for e in marked] == [shown["id"]]
    others = alice_evaluator_client.get(EVALUATIONS_URL, {"untrained": "false"}).json()["count"]
    assert others == Evaluation.objects.count() - 1
    assert alice_evaluator_client.get(EVALUATIONS_URL, {"untrained": "maybe"}).status_code == 400
    assert launch(alice_evaluator_client, allow_label_mismatch="maybe").status_code == 400


def test_a_model_the_loop_cannot_run_as_declared_is_refused_at_launch(  # type: ignore[no-untyped-def]
    bob_client, alice_evaluator_client, hosts
):
    """Not dispatched to fail on a host: another task, or outputs the loop would not read."""
    from tests.helpers import error_of
    from tests.hub.factories import dataset_manifest, model_manifest, to_yaml, upload

    boxes = dataset_manifest("boxes", visibility="public")
    boxes["task"] = "object_detection"
    detector = model_manifest("detector", visibility="public")
    detector["task"] = "object_detection"
    instances = dataset_manifest("instances", visibility="public")
    instances["task"] = "instance_segmentation"
    outliner = model_manifest("outliner", visibility="public")
    outliner["task"] = "instance_segmentation"
    masks = dataset_manifest("masks", visibility="public")
    masks["task"] = "semantic_segmentation"
    segmenter = model_manifest("segmenter", visibility="public")
    segmenter["task"] = "semantic_segmentation"
    two = model_manifest("two-heads", visibility="public")
    two["outputs"].append(
        {
            "name": "embedding",
            "type": "logits",
            "parameters": {"top_k": 1, "labels": ["cat", "dog"]},
        }
    )
    for manifest in (boxes, detector, instances, outliner, masks, segmenter, two):
        assert upload(bob_client, to_yaml(manifest)).status_code == 201

    for model, dataset, words in (
        (
            "detector",
            "boxes",
            "detector is an object_detection model with outputs of types logits; the loop reads "
            "exactly one each of boxes, scores and classes",
        ),
        (
            "outliner",
            "instances",
            "outliner is an instance_segmentation model; the evaluation loop scores "
            "image_classification, multi_label_classification, regression, "
            "sequence_labelling, object_detection, semantic_segmentation, text_recognition "
            "and feature_extraction models (instance segmentation scoring is not built yet); "
            "time it with latency_only",
        ),
        (
            "segmenter",
            "masks",
            "needs parameters.layout (NCHW or NHWC): where a semantic_segmentation model's "
            "per-pixel class axis is",
        ),
        (
            "two-heads",
            "d",
            "two-heads declares 2 scored outputs (probabilities, embedding); the evaluation loop reads one",
        ),
    ):
        response = launch(alice_evaluator_client, model=model, dataset=dataset)
        assert response.status_code == 400, response.content
        assert response.json()["code"] == "unsupported"
        error = error_of(response)
        assert error["path"] == "model" and words in error["message"], error
    assert Evaluation.objects.count() == 0


def test_anonymous_callers_get_401(client, hosts) -> None:  # type: ignore[no-untyped-def]
    response = client.post(EVALUATIONS_URL, {"model": "m"}, content_type="application/json")

    assert response.status_code == 401


def test_a_token_without_the_evaluate_scope_gets_403(make_client, alice, hosts) -> None:  # type: ignore[no-untyped-def]
    response = launch(make_client(alice, scopes=["read"]))

    assert response.status_code == 403
    assert "evaluate" in response.json()["detail"]


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"model": "secret"}, "model"),
        ({"dataset": "hidden"}, "dataset"),
        ({"model": "nothing"}, "model"),
    ],
)
def test_another_users_private_model_or_dataset_is_404(
    alice_evaluator_client, hosts, fields, path
) -> None:  # type: ignore[no-untyped-def]
    response = launch(alice_evaluator_client, **fields)

    assert response.status_code == 404
    assert error_paths(response) == [path]


def test_the_owner_of_a_private_model_can_evaluate_it(bob_client, hosts) -> None:  # type: ignore[no-untyped-def]
    assert launch(bob_client, model="secret", dataset="hidden").status_code == 201


def test_hosts_one_is_queued_dispatched_and_sent_to_the_capability_queue(
    alice_evaluator_client, hosts, broker, django_capture_on_commit_callbacks
) -> None:
    broker.drain("pool.onnxruntime.cpu")
    with django_capture_on_commit_callbacks(execute=True):
        response = launch(alice_evaluator_client, batch_sizes=[1, 32], repeat=2)

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["count"] == 1
    (shown,) = body["evaluations"]
    evaluation = Evaluation.objects.get()
    assert shown["id"] == str(evaluation.pk)
    assert shown["status"] == "dispatched"
    assert shown["model"] == {
        "id": evaluation.model_id,
        "name": "m",
        "version": "1.1.0",
        "framework": "onnxruntime",
    }
    assert [h["status"] for h in shown["history"]] == ["queued", "dispatched"]
    assert evaluation.queue == "pool.onnxruntime.cpu" and evaluation.target_host is None
    assert evaluation.request["batch_sizes"] == [1, 32] and evaluation.request["repeat"] == 2
    assert len(evaluation.trace_id) == 32 and int(evaluation.trace_id, 16)
    assert list(StatusChange.objects.values_list("status", flat=True)) == ["queued", "dispatched"]
    assert broker.take("pool.onnxruntime.cpu") == [(TASK_NAME, [str(evaluation.pk), 1])]


def test_a_request_only_some_consumers_of_the_queue_meet_is_pinned_to_one_host(
    alice_evaluator_client, hosts, broker, django_capture_on_commit_callbacks
) -> None:
    broker.drain("pool.host.gpu-1")
    with django_capture_on_commit_callbacks(execute=True):
        response = launch(alice_evaluator_client, framework_version="^1.18")

    assert response.status_code == 201
    evaluation = Evaluation.objects.get()
    assert evaluation.queue == "pool.host.gpu-1"
    assert evaluation.target_host == hosts["gpu-1"]
    assert broker.take("pool.host.gpu-1") == [(TASK_NAME, [str(evaluation.pk), 1])]


def test_a_gpu_request_goes_to_the_cuda_queue(alice_evaluator_client, hosts) -> None:
    response = launch(alice_evaluator_client, device="gpu", gpu_model="a100", min_memory_gb=40)

    assert response.status_code == 201, response.content
    assert Evaluation.objects.get().queue == "pool.onnxruntime.gpu"


def test_hosts_all_fans_out_one_evaluation_per_matching_host(
    alice_evaluator_client, hosts, broker, django_capture_on_commit_callbacks
) -> None:
    broker.drain("pool.host.cpu-1", "pool.host.cpu-2", "pool.host.gpu-1")
    with django_capture_on_commit_callbacks(execute=True):
        response = launch(alice_evaluator_client, hosts="all")

    assert response.status_code == 201
    body = response.json()
    assert body["count"] == 3
    evaluations = Evaluation.objects.filter(group=body["group"])
    assert sorted(e.target_host.name for e in evaluations) == ["cpu-1", "cpu-2", "gpu-1"]
    for evaluation in evaluations:
        queue = f"pool.host.{evaluation.target_host.name}"
        assert evaluation.queue == queue
        assert broker.take(queue) == [(TASK_NAME, [str(evaluation.pk), 1])]


def test_an_unreachable_broker_keeps_the_dispatch_to_send_again_saying_so(
    alice_evaluator_client, hosts, broker, django_capture_on_commit_callbacks, monkeypatch, settings
) -> None:
    from evaluations import actions, tasks

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ConnectionRefusedError("connection refused")

    monkeypatch.setattr(tasks.app, "send_task", refuse)
    with django_capture_on_commit_callbacks(execute=True):
        response = launch(alice_evaluator_client)

    assert response.status_code == 201
    evaluation = Evaluation.objects.get()
    assert evaluation.status == "dispatched" and evaluation.sent_at is None
    reason = evaluation.history.last().reason
    assert reason.startswith("the hub could not reach its Celery broker (connection refused)")
    assert "it waits up to 600 s" in reason
    # The broker is back: the sweep sends the dispatch again.
    monkeypatch.undo()
    later = timezone.now() + timedelta(seconds=settings.EVALUATION_SEND_SECONDS + 1)
    with django_capture_on_commit_callbacks(execute=True):
        actions.requeue_lost(later)
    evaluation.refresh_from_db()
    assert evaluation.status == "dispatched" and evaluation.dispatches == 2
    assert evaluation.sent_at is not None
    assert broker.take("pool.onnxruntime.cpu") == [(TASK_NAME, [str(evaluation.pk), 2])]


def test_a_launch_solves_its_request_once(alice_evaluator_client, hosts, monkeypatch) -> None:
    from hub import solver

    calls = []
    solve = solver.solve

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[1])
        return solve(*args, **kwargs)

    monkeypatch.setattr(solver, "solve", counted)
    response = launch(alice_evaluator_client, min_memory_gb=8, arch="amd64", hosts="all")

    assert response.status_code == 201, response.content
    assert response.json()["count"] == 2  # cpu-1 and cpu-2
    assert len(calls) == 1
    assert (calls[0].min_memory_gb, calls[0].arch, calls[0].dataset) == (8, "amd64", "d")


def test_a_job_option_is_written_once_in_the_protocol() -> None:
    """Every job option is a field of the launch request, with the protocol's bounds, and the
    evaluation loop takes it by name."""
    import dataclasses

    from evaluations.api.serializers import EvaluationRequestSerializer
    from predictors.evaluation import EvaluationOptions
    from predictors.protocol import JobOptions

    fields = EvaluationRequestSerializer().fields
    loop = {f.name for f in dataclasses.fields(EvaluationOptions)}
    for spec in dataclasses.fields(JobOptions):
        assert spec.name in fields and spec.name in loop, spec.name
        assert fields[spec.name].help_text == spec.metadata["help"]
    assert (
        fields["warmup"].max_value == JobOptions.__dataclass_fields__["warmup"].metadata["maximum"]
    )


def test_a_launch_overrides_manifest_parameters_validated_like_the_manifest(
    alice_evaluator_client, agent, hosts
) -> None:
    """`overrides` as `mlms evaluate --set` takes them: applied to the manifest and checked,
    recorded with the evaluation, shown, carried by the job, and found in the history."""
    from tests.evaluations.factories import claim, error_paths, launched_id

    overrides = ["inputs.0.parameters.color_mode=BGR", "outputs.0.parameters.top_k=2"]
    response = launch(alice_evaluator_client, overrides=overrides)

    assert response.status_code == 201, response.content
    (shown,) = response.json()["evaluations"]
    assert shown["overrides"] == overrides
    evaluation = Evaluation.objects.get(pk=launched_id(response))
    assert evaluation.overrides == "\n".join(overrides)
    job = claim(agent, evaluation.pk, hosts["cpu-1"]).json()
    assert job["options"]["overrides"] == overrides
    listed = alice_evaluator_client.get(EVALUATIONS_URL, {"override": "color_mode=BGR"}).json()
    assert [e["id"] for e in listed["results"]] == [str(evaluation.pk)]
    assert alice_evaluator_client.get(EVALUATIONS_URL, {"override": "RGB"}).json()["count"] == 0

    for bad, words in (
        (["inputs.0.parameters.color_mode=CMYK"], "color_mode"),
        (["inputs.0.parameters.nothing_here.deeper=1"], "nothing_here"),
        (["no equals sign"], "PATH=VALUE"),
        (["a=1", "a=1"], "twice"),
        ([f"inputs.0.name={'x' * 200}"], "120"),
    ):
        refused = launch(alice_evaluator_client, overrides=bad)
        assert refused.status_code == 400, (bad, refused.content)
        assert error_paths(refused)[0].split(".")[0] == "overrides"
        assert words in refused.json()["detail"], refused.json()
    assert Evaluation.objects.count() == 1
