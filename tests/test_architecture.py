"""What may import what (docs/architecture.md), read from the source itself."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from predictors.protocol import TRACE_LEVELS

ROOT = Path(__file__).resolve().parent.parent
APPS = ("hub", "evaluations", "traces", "frontend", "predictors", "mlmodelscope")


def _sources(*packages: str) -> Iterator[Path]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def _app(module: str) -> str:
    return module.split(".", 1)[0]


def _imports(path: Path) -> Iterator[tuple[int, str, str | None, str]]:
    """(line, module, name, local name) of every import in `path`; name None for
    `import module`."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None, alias.asname or alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node.lineno, node.module, alias.name, alias.asname or alias.name


def test_no_app_uses_another_apps_private_names() -> None:
    found = []
    for path in _sources(*APPS):
        own = path.relative_to(ROOT).parts[0]
        modules: dict[str, str] = {}  # alias → the app of the module it names
        for line, module, name, local in _imports(path):
            if _app(module) not in APPS or _app(module) == own:
                continue
            if name is not None and name.startswith("_"):
                found.append(f"{path.relative_to(ROOT)}:{line}: {module}.{name}")
            modules[local] = module if name is None else f"{module}.{name}"
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not found, "private names used across apps:\n" + "\n".join(found)


def test_the_hub_app_imports_nothing_of_the_apps_built_on_it() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in _sources("hub")
        for line, module, _, _ in _imports(path)
        if _app(module) in ("evaluations", "traces", "frontend")
    ]
    assert not found, "hub/ depends on apps built on it:\n" + "\n".join(found)


def test_the_traces_app_imports_only_the_models_of_the_evaluations_app() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in _sources("traces")
        for line, module, _, _ in _imports(path)
        if (_app(module) == "evaluations" and module != "evaluations.models")
        or _app(module) == "frontend"
    ]
    assert not found, "traces/ may import evaluations.models only:\n" + "\n".join(found)


def test_the_evaluations_app_keeps_no_trace_modules() -> None:
    kept = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "evaluations").rglob("*.py")
        if "migrations" not in path.parts and "trace" in path.name
    )
    assert not kept, "trace modules belong to traces/: " + ", ".join(kept)


def test_predictors_import_no_django_and_no_hub_app() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in _sources("predictors")
        for line, module, _, _ in _imports(path)
        if _app(module) in ("django", "rest_framework", "hub", "evaluations", "traces", "frontend")
    ]
    assert not found, "predictors/ must run without Django:\n" + "\n".join(found)
    # And importing all of it (the agent, the CLI, the protocol) loads none.
    code = (
        "import sys, predictors.agent.daemon, predictors.cli, predictors.protocol, "
        "predictors.agent.hub_client; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def _listings(text: str) -> list[str]:
    """Places in `text` that list three trace levels in a row (a definition of the levels)."""
    names = "|".join(TRACE_LEVELS)
    quoted = rf"""["'](?:{names})["']"""
    meaning = r"""(?:\s*:\s*["'][^"']*["'])?"""
    found = re.findall(rf"{quoted}{meaning}\s*,\s*{quoted}{meaning}\s*,\s*{quoted}", text)
    # Three different levels: `"framework", "framework", …` names one level thrice.
    return [m for m in found if len(set(re.findall(rf"(?:{names})", m))) >= 3]


@pytest.mark.parametrize("suffix", [".py", ".js", ".html"])
def test_the_trace_levels_are_defined_once(suffix: str) -> None:
    found = []
    for package in APPS:
        for path in sorted((ROOT / package).rglob(f"*{suffix}")):
            if "migrations" in path.parts or path.name == "protocol.py":
                continue
            if _listings(path.read_text()):
                found.append(str(path.relative_to(ROOT)))
    assert not found, "trace levels listed outside predictors/protocol.py: " + ", ".join(found)
    # The check itself finds a listing.
    assert _listings('LEVELS = ("application", "model", "framework")')
    assert _listings('{"none": "no spans", "application": "stages", "model": "+ batches"}')
    assert not _listings('Filter("framework", "framework", "framework", "choice")')
