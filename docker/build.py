"""Build the images, offline: `make images` (or `python docker/build.py [IMAGE ...] [--gpu]`).

1. The wheelhouse (`var/images/context/wheels`): every wheel the images install, downloaded on
   this host by pip from the packages that requirements/ names, pinned by constraints.txt: the
   same wheels as the tested virtualenv. Inside a build nothing is fetched from PyPI.
2. The package's own wheel (`var/images/context/project`).
3. `mlmodelscope/base:bookworm`: a Debian bookworm root filesystem made by `debootstrap
   --variant=minbase` from the Debian archive, with Python 3.11, then `docker import`ed (no
   image is pulled from any registry). Needs root and debootstrap.
4. The images (BuildKit, so that each step bind-mounts only what it reads; no wheel is left in
   a layer): a predictor image per framework for the CPU, the hub, and the services image
   (PostgreSQL and Redis) that docker-compose.yml runs.

Each image carries the hash of everything it was built from (label
`org.mlmodelscope.inputs`): an image whose inputs did not change is not built again, so that
running this with nothing changed takes seconds. An image's id (the sha256 digest of its
configuration, which names its layers) identifies the software stack a result ran on.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "var" / "images"
CONTEXT = WORK / "context"
INPUTS_LABEL = "org.mlmodelscope.inputs"
BASE = "mlmodelscope/base:bookworm"
# What debootstrap puts in the base beside `minbase`: Python 3.11 and its venv module.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
DEBIAN_MIRROR = os.environ.get("MLMS_DEBIAN_MIRROR", "http://deb.debian.org/debian")
VERSION = "0.1.0"


@dataclass(frozen=True)
class Image:
    """One image: its tag, Dockerfile, build arguments and whether it installs the package."""

    name: str  # the short name `make images IMAGES=...` takes
    tag: str
    dockerfile: Path
    context: Path
    arguments: dict[str, str] = field(default_factory=dict)
    project: bool = True


def _pinned(requirements: Path, package: str) -> str:
    """The version pinned for `package` in a requirements file."""
    for line in requirements.read_text(encoding="utf-8").splitlines():
        name, _, version = line.split("#")[0].strip().partition("==")
        if name.strip().lower() == package:
            return version.strip()
    raise SystemExit(f"{requirements}: no pin for {package}")


# The framework images' tags are the ones the built-in manifests' `container` fields name:
# mlmodelscope/<framework>:<major.minor>-<device>.
FRAMEWORKS = {"pytorch": "torch", "tensorflow": "tensorflow-cpu", "onnxruntime": "onnxruntime"}


def images(device: str) -> list[Image]:
    found = []
    for framework, package in FRAMEWORKS.items():
        version = _pinned(ROOT / "requirements" / f"{framework}.txt", package)
        short = ".".join(version.split(".")[:2])
        tag = f"mlmodelscope/{framework}:{short}-{device}"
        found.append(
            Image(
                framework,
                tag,
                ROOT / "docker" / "predictor" / "Dockerfile",
                CONTEXT,
                {
                    "FRAMEWORK": framework,
                    "FRAMEWORK_VERSION": version,
                    "DEVICE": device,
                    "IMAGE": tag,
                },
            )
        )
    hub = f"mlmodelscope/hub:{VERSION}"
    found.append(Image("hub", hub, ROOT / "docker" / "hub" / "Dockerfile", CONTEXT, {"IMAGE": hub}))
    services = "mlmodelscope/services:bookworm"
    found.append(
        Image(
            "services",
            services,
            ROOT / "docker" / "services" / "Dockerfile",
            ROOT / "docker" / "services",
            {"IMAGE": services},
            project=False,
        )
    )
    return found


# -- steps -------------------------------------------------------------------------------------


def _say(message: str) -> None:
    print(message, flush=True)


def _hash(parts: Iterable[bytes | str]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _requirement_files(gpu: bool) -> list[Path]:
    files = sorted((ROOT / "requirements").glob("*.txt"))
    if gpu:
        files += sorted((ROOT / "requirements" / "gpu").glob("*.txt"))
    return files


def wheelhouse(gpu: bool) -> str:
    """Download the wheels (when requirements/ or constraints.txt changed); their hash."""
    files = [ROOT / "constraints.txt", *_requirement_files(gpu)]
    inputs = _hash(path.read_bytes() for path in files)
    wheels = CONTEXT / "wheels"
    stamp = wheels / ".inputs"
    # The requirement files and the constraints go into the context beside the wheels.
    CONTEXT.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "requirements", CONTEXT / "requirements", dirs_exist_ok=True)
    shutil.copy2(ROOT / "constraints.txt", CONTEXT / "constraints.txt")
    if stamp.exists() and stamp.read_text() == inputs:
        _say("wheelhouse: up to date")
        return inputs
    _say(f"wheelhouse: downloading the pinned wheels into {wheels.relative_to(ROOT)}")
    wheels.mkdir(parents=True, exist_ok=True)
    for stale in wheels.glob("*.whl"):
        stale.unlink()
    needed = [path for path in _requirement_files(gpu) if path.name not in ("dev.txt", "zoo.txt")]
    command = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "-d", str(wheels)]
    command += ["-c", str(ROOT / "constraints.txt")]
    for path in needed:
        command += ["-r", str(path)]
    if gpu:
        command += ["--extra-index-url", "https://download.pytorch.org/whl/cu128"]
    subprocess.run(command, check=True)
    stamp.write_text(inputs)
    _say(f"wheelhouse: {len(list(wheels.glob('*.whl')))} wheels")
    return inputs


def project_wheel() -> str:
    """Build the package's wheel into the context; the hash of its contents (not of the zip,
    whose timestamps change with every build)."""
    folder = CONTEXT / "project"
    with tempfile.TemporaryDirectory(dir=WORK) as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
            + ["-w", scratch, str(ROOT)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        # setuptools leaves its build/ folder in the source tree
        shutil.rmtree(ROOT / "build", ignore_errors=True)
        (built,) = Path(scratch).glob("*.whl")
        with zipfile.ZipFile(built) as archive:
            content = _hash(
                part
                for info in sorted(archive.infolist(), key=lambda info: info.filename)
                for part in (info.filename, archive.read(info))
            )
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        shutil.move(str(built), folder / built.name)
    return content


def _docker(arguments: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *arguments], text=True, **kwargs)  # type: ignore[call-overload]


def _label(tag: str) -> str | None:
    """The inputs label of a local image, or None when there is no such image."""
    answer = _docker(
        ["image", "inspect", "--format", '{{ index .Config.Labels "' + INPUTS_LABEL + '" }}', tag],
        capture_output=True,
    )
    return answer.stdout.strip() if answer.returncode == 0 else None


def image_id(tag: str) -> str:
    answer = _docker(["image", "inspect", "--format", "{{.Id}}", tag], capture_output=True)
    return answer.stdout.strip()


def base_image() -> str:
    """`mlmodelscope/base:bookworm`, debootstrapped when missing or out of date; its id."""
    inputs = _hash([*BASE_PACKAGES, DEBIAN_MIRROR, "bookworm", "minbase", "1"])
    if _label(BASE) == inputs:
        _say(f"{BASE}: up to date")
        return image_id(BASE)
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    if not Path(debootstrap).exists():
        raise SystemExit(
            "make images: debootstrap is not installed; install it with "
            "`apt-get install debootstrap` (the base image is built from the Debian archive)"
        )
    if os.geteuid() != 0:
        raise SystemExit("make images: building the base image with debootstrap needs root")
    _say(f"{BASE}: debootstrap --variant=minbase bookworm from {DEBIAN_MIRROR} (about a minute)")
    started = time.monotonic()
    rootfs = WORK / "rootfs"
    if rootfs.exists():
        shutil.rmtree(rootfs)
    log = WORK / "debootstrap.log"
    with log.open("w") as output:
        done = subprocess.run(
            [debootstrap, "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}"]
            + ["bookworm", str(rootfs), DEBIAN_MIRROR],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-5:]
        raise SystemExit("make images: debootstrap failed:\n  " + "\n  ".join(tail))
    for leftover in (rootfs / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        leftover.unlink()
    shutil.rmtree(rootfs / "var" / "lib" / "apt" / "lists", ignore_errors=True)
    (rootfs / "var" / "lib" / "apt" / "lists" / "partial").mkdir(parents=True)
    tar = subprocess.Popen(
        ["tar", "-C", str(rootfs), "--numeric-owner", "--exclude=./proc/*", "--exclude=./sys/*"]
        + ["--exclude=./dev/*", "-c", "."],
        stdout=subprocess.PIPE,
    )
    changes = [
        f"LABEL {INPUTS_LABEL}={inputs}",
        'LABEL org.opencontainers.image.title="mlmodelscope/base"',
        "ENV LANG=C.UTF-8",
        'CMD ["/bin/bash"]',
    ]
    command = ["import"] + [arg for change in changes for arg in ("--change", change)]
    imported = _docker([*command, "-", BASE], stdin=tar.stdout, capture_output=True)
    assert tar.stdout is not None
    tar.stdout.close()
    tar.wait()
    shutil.rmtree(rootfs)
    if imported.returncode != 0:
        raise SystemExit(f"make images: docker import failed: {imported.stderr.strip()}")
    _say(f"{BASE}: imported in {time.monotonic() - started:.0f} s")
    return image_id(BASE)


def _builder() -> tuple[list[str], dict[str, str]]:
    """A docker build that runs BuildKit: `docker buildx build --load` where buildx is
    installed, else a client whose classic `build` runs BuildKit with DOCKER_BUILDKIT=1
    (Debian's /usr/bin/docker)."""
    environment = dict(os.environ)
    if _docker(["buildx", "version"], capture_output=True).returncode == 0:
        return ["docker", "buildx", "build", "--load"], environment
    for client in ("/usr/bin/docker", shutil.which("docker") or "docker"):
        version = subprocess.run(
            [client, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True
        )
        major = re.match(r"(\d+)", version.stdout.strip())
        if version.returncode == 0 and major and int(major.group(1)) < 23:
            return [client, "build"], environment | {"DOCKER_BUILDKIT": "1"}
    raise SystemExit(
        "make images: no docker client here builds with BuildKit: install buildx, or Debian's "
        "docker.io (whose client's `docker build` runs BuildKit with DOCKER_BUILDKIT=1)"
    )


def build(image: Image, inputs: str, revision: str) -> bool:
    """Build one image unless its inputs label says it is current; whether it was built."""
    if _label(image.tag) == inputs:
        _say(f"{image.tag}: up to date")
        return False
    _say(f"{image.tag}: building")
    command, environment = _builder()
    arguments = image.arguments | {"VERSION": VERSION, "REVISION": revision}
    for key, value in sorted(arguments.items()):
        command += ["--build-arg", f"{key}={value}"]
    command += ["--label", f"{INPUTS_LABEL}={inputs}", "--progress=plain"]
    command += ["-f", str(image.dockerfile), "-t", image.tag, str(image.context)]
    started = time.monotonic()
    done = subprocess.run(command, env=environment)
    if done.returncode != 0:
        raise SystemExit(f"make images: building {image.tag} failed (see above)")
    _say(f"{image.tag}: built in {time.monotonic() - started:.0f} s")
    return True


def _revision() -> str:
    answer = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return answer.stdout.strip() if answer.returncode == 0 else "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make images", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "images",
        nargs="*",
        metavar="IMAGE",
        help="which images (pytorch, tensorflow, onnxruntime, hub, services; default: all)",
    )
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="the GPU predictor images (CUDA builds; on a machine with the NVIDIA container "
        "toolkit, with the CUDA wheels reachable)",
    )
    parser.add_argument(
        "--digests",
        action="store_true",
        help="build nothing: print MLMS_DIGEST_<FRAMEWORK>=<image id> for each framework image "
        "on this host (what `make compose-up` passes to the agents' containers, which cannot "
        "read their own image's digest)",
    )
    args = parser.parse_args(argv)
    every = images("gpu" if args.gpu else "cpu")
    if args.digests:
        for image in every:
            if image.name in FRAMEWORKS:
                answer = _docker(
                    ["image", "inspect", "--format", "{{.Id}}", image.tag], capture_output=True
                )
                if answer.returncode != 0:
                    raise SystemExit(f"make images: no image {image.tag}: build it first")
                print(f"MLMS_DIGEST_{image.name.upper()}={answer.stdout.strip()}")
        return 0
    names = {image.name for image in every}
    unknown = [name for name in args.images if name not in names]
    if unknown:
        parser.error(f"no image {', '.join(unknown)}; choose among {', '.join(sorted(names))}")
    chosen = [image for image in every if not args.images or image.name in args.images]
    if args.gpu:
        chosen = [image for image in chosen if image.name in FRAMEWORKS]
    if _docker(["info"], capture_output=True).returncode != 0:
        raise SystemExit(
            "make images: the Docker daemon does not answer; start it (`dockerd &` as root) and "
            "try again"
        )
    started = time.monotonic()
    WORK.mkdir(parents=True, exist_ok=True)
    wheels = wheelhouse(args.gpu)
    project = project_wheel()
    base = base_image()
    revision = _revision()
    built = []
    for image in chosen:
        dockerfile = image.dockerfile.read_bytes()
        extra = [
            (image.context / path).read_bytes()
            for path in sorted(os.listdir(image.context))
            if image.context != CONTEXT and (image.context / path).is_file()
        ]
        parts = [dockerfile, *extra, base, wheels, repr(sorted(image.arguments.items()))]
        if image.project:
            parts.append(project)
        if build(image, _hash(parts), revision):
            built.append(image.tag)
    _say("")
    for image in chosen:
        size = _docker(
            ["image", "inspect", "--format", "{{.Size}}", image.tag], capture_output=True
        )
        megabytes = int(size.stdout.strip() or 0) / 1e6
        _say(f"  {image.tag:<36} {image_id(image.tag)[:19]}  {megabytes:,.0f} MB")
    _say(
        f"\n{len(built)} built, {len(chosen) - len(built)} up to date, in "
        f"{time.monotonic() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
