"""The roofline a result is set against (`predictors.analysis.roofline`): the theoretical peak read from
a processor's description, each framework's own matrix product, the STREAM triad, the roof
chosen against a run's points with its reason, and every zoo model in every framework it has
placed on its run's roofline with no point above the stated peak."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from predictors.analysis import roofline
from predictors.manifests.catalog import Catalog
from predictors.processing.custom_code import code_in
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free

# Two logical processors on each of two physical cores (hyper-threads share a core's units).
CPUINFO = """\
processor\t: {n}
vendor_id\t: GenuineIntel
model name\t: Test CPU
physical id\t: 0
core id\t\t: {core}
cpu MHz\t\t: {mhz}
flags\t\t: {flags}

"""


def cpuinfo(flags: str, mhz: str = "2500.000") -> str:
    return "".join(CPUINFO.format(n=n, core=n // 2, mhz=mhz, flags=flags) for n in range(4))


AVX2 = "fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx avx2"
AVX512 = AVX2 + " avx512f avx512dq avx512bw avx512vl"


@pytest.mark.parametrize(
    ("text", "options", "gflops", "words"),
    [
        # 2 cores × 2.5 GHz × 8 lanes × 2 FMA units × 2 flops
        (cpuinfo(AVX2), {}, 160.0, ["2 cores", "2.500 GHz", "8 float32 lanes (avx2)", "2 FMA"]),
        (cpuinfo(AVX512), {}, 320.0, ["16 float32 lanes (avx512f)"]),
        # No FMA: a multiply and an add a cycle, 4 lanes each
        (cpuinfo("fpu sse sse2"), {}, 40.0, ["4 float32 lanes (sse)", "no fma flag"]),
        # cpufreq's maximum over the current clock; the run's one thread uses one core
        (cpuinfo(AVX2), {"max_freq_khz": 3_000_000}, 192.0, ["cpuinfo_max_freq", "3.000 GHz"]),
        (cpuinfo(AVX2), {"threads": 1}, 80.0, ["1 core (the run's 1 thread of 2)"]),
        # Only the logical CPUs 0 and 1 may be used: one physical core
        (cpuinfo(AVX2), {"cpus": {0, 1}}, 80.0, ["1 core "]),
        (cpuinfo(AVX2), {"dtype": "float64"}, 80.0, ["4 float64 lanes"]),
        # The highest clock of the processors
        (cpuinfo(AVX2).replace("2500.000", "1200.000", 1), {}, 160.0, ["2.500 GHz"]),
    ],
)
def test_the_theoretical_peak_is_read_from_the_processors_description(
    text: str, options: dict[str, Any], gflops: float, words: list[str]
) -> None:
    found = roofline.theoretical_cpu(text, **options)
    assert found["gflops"] == pytest.approx(gflops)
    for word in words:
        assert word in found["method"], found["method"]


def test_an_arm_processor_without_a_clock_says_the_peak_is_unknown() -> None:
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes crc32\n\n"
    assert roofline.theoretical_cpu(arm)["gflops"] is None
    assert "no clock" in roofline.theoretical_cpu(arm)["reason"]
    # With cpufreq's clock: 1 core × 3 GHz × 4 lanes (asimd) × 2 FMA units × 2 flops
    found = roofline.theoretical_cpu(arm, max_freq_khz=3_000_000)
    assert found["gflops"] == pytest.approx(48.0) and "asimd" in found["method"]
    unknown = roofline.theoretical_cpu(cpuinfo("fpu"))
    assert unknown["gflops"] is None and "no vector flag" in unknown["reason"]
    assert roofline.theoretical_cpu(cpuinfo(AVX2), dtype="int8")["gflops"] is None


def test_this_machines_theoretical_peak_is_read_from_its_own_processor() -> None:
    """/proc/cpuinfo and cpufreq, for the CPUs this process may run on."""
    max_freq = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    expected = roofline.theoretical_cpu(
        Path("/proc/cpuinfo").read_text(),
        max_freq_khz=float(max_freq.read_text()) if max_freq.exists() else None,
        cpus=os.sched_getaffinity(0),
    )
    assert roofline.theoretical_peak("cpu") == expected


PRODUCTS = {
    "onnxruntime": "onnxruntime MatMul",
    "pytorch": "torch.matmul",
    "tensorflow": "tf.linalg.matmul",
}


@pytest.mark.parametrize("framework", sorted(PRODUCTS))
def test_each_framework_measures_its_own_matrix_product(framework: str) -> None:
    """The measured peak is the framework's own product, at the thread count asked (one, as
    the suite's TensorFlow pools are sized), with the method that says so."""
    module = {"pytorch": "torch"}.get(framework, framework)
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{framework} is not installed")
    found = roofline.matmul_peak(framework, "cpu", threads=1)
    assert found["gflops"] > 0, found
    assert found["framework"] == framework and found["size"] in roofline.SIZES
    assert found["method"].startswith(PRODUCTS[framework])
    assert "512×512 and 1024×1024 float32" in found["method"]
    assert "1 intra-op thread," in found["method"] or "1 thread," in found["method"]
    # The roofline of a run in this framework states both peaks, the bandwidth and the roof.
    measured = roofline.measure("cpu", framework, 1)
    assert measured["peaks"]["measured"]["method"].startswith(PRODUCTS[framework])
    assert measured["roof"]["source"] == "measured"
    assert measured["peak_gflops_per_s"] == measured["peaks"]["measured"]["gflops"]


def test_a_framework_it_does_not_know_is_refused_and_a_device_it_lacks_says_why() -> None:
    with pytest.raises(ValueError, match="framework must be one of"):
        roofline.matmul_peak("caffe", "cpu")
    missing = roofline.measure("cuda:63")
    assert missing["measured"] is False and missing["reason"]
    assert missing["peaks"]["measured"]["reason"] and missing["peaks"]["theoretical"]["reason"]


def test_the_bandwidth_is_a_stream_triad_beyond_the_last_level_cache() -> None:
    found = roofline.bandwidth("cpu", 1)
    assert found["gb_per_s"] > 0
    assert found["method"].startswith("STREAM triad a = b + s·c, numpy float64, 3 arrays of")
    llc = roofline._llc_bytes()
    array_mib = int(found["method"].split("3 arrays of ")[1].split(" MiB")[0])
    wanted = max(roofline.TRIAD_MIN_BYTES, roofline.TRIAD_LLC_TIMES * (llc or 0))
    if "capped by the memory available" in found["method"]:
        assert array_mib << 20 < wanted
    else:
        assert array_mib << 20 >= wanted


def test_the_host_roofline_is_numpys_with_both_peaks_and_the_ridge() -> None:
    cpu = roofline.measure("cpu")
    assert cpu["measured"] is True and cpu["device"] == "cpu" and cpu["framework"] == "numpy"
    assert cpu["peak_gflops_per_s"] > 0 and cpu["bandwidth_gb_per_s"] > 0
    assert cpu["ridge_flop_per_byte"] == pytest.approx(
        cpu["peak_gflops_per_s"] / cpu["bandwidth_gb_per_s"], rel=1e-3
    )
    assert "numpy matmul" in cpu["method"] and "STREAM triad" in cpu["method"]
    assert cpu["peaks"]["theoretical"]["gflops"] or cpu["peaks"]["theoretical"]["reason"]


# --- the roof against a run's points ---------------------------------------------------------

ROOF = {
    "device": "cpu",
    "framework": "onnxruntime",
    "measured": True,
    "peaks": {
        "measured": {"gflops": 100.0, "method": "onnxruntime MatMul"},
        "theoretical": {"gflops": 200.0, "method": "2 cores × …"},
    },
    "bandwidth": {"gb_per_s": 10.0, "method": "STREAM triad"},
    "roof": {"gflops": 100.0, "source": "measured", "why": "the measured peak"},
    "peak_gflops_per_s": 100.0,
    "bandwidth_gb_per_s": 10.0,
}


def points(*values: float, intensity: float = 50.0) -> list[dict[str, Any]]:
    return [
        {"batch_size": 2**i, "gflops_per_s": value, "intensity": intensity}
        for i, value in enumerate(values)
    ]


def test_the_roof_is_the_measured_peak_while_it_holds_every_point() -> None:
    placed, achieved = roofline.place(ROOF, points(20.0, 80.0))
    assert placed["roof"]["source"] == "measured" and placed["peak_gflops_per_s"] == 100.0
    assert [a["of_peak"] for a in achieved] == [0.2, 0.8]
    assert not any("note" in a for a in achieved)
    assert placed["ridge_flop_per_byte"] == 10.0


def test_a_point_past_the_measured_peak_raises_the_roof_to_the_theoretical_one() -> None:
    placed, achieved = roofline.place(ROOF, points(20.0, 150.0))
    assert placed["roof"]["source"] == "theoretical" and placed["peak_gflops_per_s"] == 200.0
    assert "batch size 2 reached 150.0 GFLOP/s, past the measured peak" in placed["roof"]["why"]
    assert [a["of_peak"] for a in achieved] == [0.1, 0.75]
    assert placed["method"].startswith("roof: the theoretical peak")


def test_a_point_past_every_peak_is_the_roof_and_flagged_as_an_error_of_the_counts() -> None:
    placed, achieved = roofline.place(ROOF, points(20.0, 250.0))
    assert placed["roof"]["source"] == "best point" and placed["peak_gflops_per_s"] == 250.0
    assert "measured 100.0 GFLOP/s, theoretical 200.0 GFLOP/s" in placed["roof"]["why"]
    assert [a["of_peak"] for a in achieved] == [0.08, 1.0]
    assert "note" not in achieved[0]
    assert achieved[1]["note"] == roofline.COUNT_NOTE


def test_a_point_above_the_memory_slope_says_its_bytes_stay_in_the_caches() -> None:
    # At 2 FLOP/byte the roof is 10 GB/s × 2 = 20 GFLOP/s.
    placed, achieved = roofline.place(
        ROOF, [{"batch_size": 1, "gflops_per_s": 30.0, "intensity": 2.0, "bytes": 3 << 20}]
    )
    assert placed["roof"]["source"] == "measured" and achieved[0]["of_peak"] == 0.3
    assert achieved[0]["note"].startswith("above the memory slope at its intensity")
    assert "3.0 MiB of weights and activations" in achieved[0]["note"]
    assert roofline.roof_at(placed, 2.0) == 20.0 and roofline.roof_at(placed, None) == 100.0


def test_without_a_measured_peak_the_theoretical_one_is_the_roof() -> None:
    roof = ROOF | {
        "peaks": {"measured": {"gflops": None, "reason": "no such provider"},
                  "theoretical": ROOF["peaks"]["theoretical"]},
        "roof": {"gflops": 200.0, "source": "theoretical", "why": "the theoretical peak"},
        "peak_gflops_per_s": 200.0,
    }  # fmt: skip
    placed, achieved = roofline.place(roof, points(150.0))
    assert placed["roof"]["source"] == "theoretical" and achieved[0]["of_peak"] == 0.75
    placed, achieved = roofline.place(roof, points(300.0))
    assert placed["roof"]["source"] == "best point" and achieved[0]["note"] == roofline.COUNT_NOTE


# --- every zoo model in every framework, on this machine ------------------------------------

# Each zoo model, the dataset it is evaluated on and the batch sizes it takes: 1, 8 and 32
# where its inputs batch; the detector's images differ in size (batch size 1); the ImageNet-size
# models at batch size 1 here (benchmarks/roofline.py places them at 1, 8 and 32) to keep the
# suite fast. Streams feed several inputs at once and are not counted: their run says why.
ZOO_RUNS: dict[str, tuple[str, tuple[int, ...]]] = {
    "digits-cnn": ("digits", (1, 8, 32)),
    "shapes-color": ("shapes-color", (1, 8, 32)),
    "diabetes-mlp": ("diabetes", (1, 8, 32)),
    "shapes-tagger": ("shapes-sets", (1, 8, 32)),
    "shapes-segmenter": ("shapes-masks", (1, 8, 32)),
    "text-direction": ("text-lines", (1, 8, 32)),
    "shapes-detector": ("shapes-boxes", (1,)),
    "alexnet": ("digits", (1,)),
    "resnet-18": ("digits", (1,)),
    "resnet-50": ("digits", (1,)),
    "mobilenet-v2": ("digits", (1,)),
    "toggle-gru": ("toggle-clicks", (1,)),
    "silero-vad": ("speech-clips", (1,)),
    "text-recognizer": ("text-transcripts", (1, 8)),
    "file-type": ("file-types", (1, 8, 32)),
    "speaker-encoder": ("speaker-clips", (1, 4)),
    "basic-pitch": ("piano-chords", (1, 4)),
    "text-detector": ("text-pages", (1,)),
    "review-sentiment": ("short-reviews", (1, 8, 32)),
}
CASES = [
    (name, framework)
    for name in sorted(ZOO_RUNS)
    for framework in Catalog().model_frameworks(name, "*")
]


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(tuple(ZOO_RUNS))


def test_the_cases_are_every_zoo_model_in_every_framework() -> None:
    models = {manifest.name for manifest in Catalog().manifests("model")}
    assert models == set(ZOO_RUNS)


def assert_no_point_above_the_stated_peak(theoretical: dict[str, Any]) -> None:
    """Every point's share of the stated peak is at most 100 %; a point above the roof at its
    intensity carries its reason; the roof is one of the stated peaks (or the best point,
    flagged), and every peak says how it was obtained."""
    roof = theoretical["roofline"]
    assert roof["measured"] is True, roof
    peaks = roof["peaks"]
    for found in (peaks["measured"], peaks["theoretical"]):
        assert found["method"] if found.get("gflops") else found["reason"]
    assert roof["bandwidth"]["method"].startswith("STREAM triad")
    peak = roof["peak_gflops_per_s"]
    source = roof["roof"]["source"]
    assert roof["method"].startswith("roof: " + roof["roof"]["why"])
    if source in ("measured", "theoretical"):
        assert peak == peaks[source]["gflops"]
    else:
        assert source == "best point"
        assert peak == max(a["gflops_per_s"] for a in theoretical["achieved"])
    for point in theoretical.get("achieved") or []:
        share = point["of_peak"]
        assert share <= 1.0, point
        assert share == pytest.approx(point["gflops_per_s"] / peak, abs=1e-4)
        if point["gflops_per_s"] > roofline.roof_at(roof, point["intensity"]) * (1 + 1e-9):
            assert point.get("note"), point
        stated = max(g for g in (peaks["measured"]["gflops"], peaks["theoretical"]["gflops"]) if g)
        if point["gflops_per_s"] > stated:
            assert point["note"] == roofline.COUNT_NOTE


@pytest.mark.parametrize(("name", "framework"), CASES)
def test_no_zoo_point_is_above_its_stated_peak(
    run_evaluation: RunEvaluation, name: str, framework: str
) -> None:
    """Evaluated here with few inputs at its batch sizes, in the framework's own process
    state (one intra-op thread): its points sit under the roof its run states, or say why."""
    module = {"pytorch": "torch"}.get(framework, framework)
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{framework} is not installed")
    dataset, batch_sizes = ZOO_RUNS[name]
    evaluation = run_evaluation(
        model=name,
        framework=framework,
        dataset=dataset,
        batch_sizes=batch_sizes,
        limit=max(batch_sizes),
        warmup=1,
        repeat=1,
        # A state dict's module, and postprocess code, are the manifest's own (custom code).
        custom_code=bool(code_in(Catalog().find_model(name, "*", framework).data)),
    )
    theoretical = evaluation.result["theoretical"]
    roof = theoretical["roofline"]
    assert roof["framework"] == framework and roof["threads"] == 1
    assert roof["peaks"]["measured"]["method"].startswith(PRODUCTS[framework])
    if not theoretical["counted"]:  # streams, windows: no point to place, the reason is given
        assert "streams" in theoretical["reason"] or "windows" in theoretical["reason"]
        return
    assert [a["batch_size"] for a in theoretical["achieved"]] == list(batch_sizes)
    assert_no_point_above_the_stated_peak(theoretical)
