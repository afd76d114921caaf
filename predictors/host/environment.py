"""The software environment of this Python and this system: every installed Python
distribution and every Debian package, with versions.

    python -m predictors.host.environment        # JSON on standard output

The images (docker/) write it to /etc/mlmodelscope/environment.json when they are built; an
agent running evaluations in containers reads it once per image and registers it with the hub,
which keeps it once per image digest (`GET /api/v1/images/<digest>/`), so that two results can
say which packages differ between the stacks they ran on.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["debian_packages", "environment", "python_packages"]


def python_packages() -> dict[str, str]:
    """Installed distributions (normalised lower-case names) and their versions."""
    found: dict[str, str] = {}
    for distribution in metadata.distributions():
        name = distribution.metadata["Name"]
        if name:
            found[name.lower().replace("_", "-")] = distribution.version
    return dict(sorted(found.items()))


def debian_packages() -> dict[str, str]:
    """Installed Debian packages and their versions; empty where dpkg is not there."""
    dpkg = shutil.which("dpkg-query")
    if dpkg is None:
        return {}
    listing = subprocess.run(
        [dpkg, "-W", "-f", "${db:Status-Abbrev}\t${Package}\t${Version}\n"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    found = {}
    for line in listing.splitlines():
        status, _, rest = line.partition("\t")
        package, _, version = rest.partition("\t")
        if status.startswith("ii") and package:
            found[package] = version
    return dict(sorted(found.items()))


def _os_release() -> str | None:
    try:
        text = Path("/etc/os-release").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "PRETTY_NAME":
            return value.strip().strip('"')
    return None


def environment() -> dict[str, Any]:
    return {
        "os": _os_release(),
        "architecture": platform.machine(),
        "python": platform.python_version(),
        "python_packages": python_packages(),
        "debian_packages": debian_packages(),
    }


if __name__ == "__main__":
    json.dump(environment(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
