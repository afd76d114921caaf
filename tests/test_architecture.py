"""What may import what (docs/architecture.md), read from the source itself."""

from __future__ import annotations

import ast
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from predictors.protocol import (
    DEVICES,
    LATENCY_KEYS,
    LOCAL_DEVICES,
    STATUSES,
    TRACE_LEVELS,
    JobOptions,
)

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


def _module_of(path: Path) -> str:
    """The dotted name of the product module at `path` (a package's is its `__init__.py`)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(module: str) -> bool:
    return (ROOT / module.replace(".", "/") / "__init__.py").is_file()


def _is_module(module: str) -> bool:
    return _is_package(module) or (ROOT / f"{module.replace('.', '/')}.py").is_file()


def _package(module: str) -> str:
    """The package a product module belongs to: a package's own `__init__` belongs to it."""
    return module if _is_package(module) else module.rpartition(".")[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for the expression a.b.c (names and attributes only), else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def private_uses(source: str, module: str) -> Iterator[tuple[int, str]]:
    """(line, module.name) of each private name of a product module outside the package of
    `module` that its `source` imports (`from m import _x`) or reads (`m._x`, `a.b._x`)."""
    own = _package(module)
    modules: dict[str, str] = {}  # a local name → the product module it is bound to
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                modules[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: from the package, one level up per dot past the first
                base = own.split(".")[: len(own.split(".")) - node.level + 1]
                module = ".".join([*base, *([module] if module else [])])
            if _app(module) not in APPS:
                continue
            for alias in node.names:
                if _is_module(f"{module}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{module}.{alias.name}"
                if _private(alias.name) and _package(module) != own:
                    yield node.lineno, f"{module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            dotted = _dotted(node.value)
            if dotted is None:
                continue
            head, _, rest = dotted.partition(".")
            if head not in modules:
                continue
            module = f"{modules[head]}.{rest}" if rest else modules[head]
            if _app(module) in APPS and _is_module(module) and _package(module) != own:
                yield node.lineno, f"{module}.{node.attr}"


def test_no_module_uses_a_private_name_of_another_package() -> None:
    """A name shared beyond its package is public, where it belongs: no module imports or
    reads a `_private` name of a module outside its own package (a package's `__init__` is in
    it), across apps or within one."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in _sources(*APPS)
        for line, name in private_uses(path.read_text(), _module_of(path))
    ]
    assert not found, "private names used outside their package:\n" + "\n".join(found)
    # The check itself finds each form, and lets a package's modules share theirs.
    outside = "from predictors.cli import _count\nimport predictors.cli\npredictors.cli._table\n"
    assert [n for _, n in private_uses(outside, "predictors.evaluation.study")] == [
        "predictors.cli._count",
        "predictors.cli._table",
    ]
    aliased = "from predictors import cli as c\nfrom predictors.cli import flops\nc._x, flops._y\n"
    assert len(list(private_uses(aliased, "hub.models"))) == 2
    inside = "from predictors.cli import _count\nfrom . import _table\nfrom .flops import _z\n"
    assert not list(private_uses(inside, "predictors.cli.history"))
    assert not list(private_uses("from os import _exit\nimport os\nos._exit(0)\n", "hub.models"))


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
        "import sys, predictors.agent.main, predictors.cli, predictors.protocol, "
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
            if "migrations" in path.parts or "protocol" in path.relative_to(ROOT).parts[:2]:
                continue
            if _listings(path.read_text()):
                found.append(str(path.relative_to(ROOT)))
    assert not found, "trace levels listed outside predictors/protocol/: " + ", ".join(found)
    # The check itself finds a listing.
    assert _listings('LEVELS = ("application", "model", "framework")')
    assert _listings('{"none": "no spans", "application": "stages", "model": "+ batches"}')
    assert not _listings('Filter("framework", "framework", "framework", "choice")')


# -- every shared name written once, in the protocol -------------------------------------------

# The words the protocol writes once (`predictors/protocol/`): a second definition of any of
# them elsewhere in the product is a copy that can drift.
VOCABULARIES: dict[str, frozenset[str]] = {
    "status": frozenset(STATUSES),
    "device": frozenset(DEVICES) | frozenset(LOCAL_DEVICES),
    "latency key": frozenset(LATENCY_KEYS),
    "job option": frozenset(JobOptions.names()),
}
# The fewest words a listing of each holds. A status, a device or a latency key is a value, and
# any set of them (the finished statuses) is the protocol's to define; a job option is a field,
# named where it is used (a study's swept options, a flag spelled otherwise): a listing of a
# quarter of them or more restates the options (the fields a page copies, a report's).
_FEWEST = {what: 1 for what in VOCABULARIES} | {
    "job option": math.ceil(len(VOCABULARIES["job option"]) / 4)
}
# Words written as constants of their own (`QUEUED = "queued"`); a job option is no constant.
_CONSTANTS = ("status", "device", "latency key")
_COLLECTIONS = (ast.Tuple, ast.List, ast.Set)


def _members(node: ast.expr) -> list[str | None] | None:
    """The members of a literal collection, each the string it is (a choice pair's value, a
    dict's key) or None; None when `node` is no literal collection."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("frozenset", "set", "tuple", "list")
        and len(node.args) == 1
    ):
        return _members(node.args[0])
    if isinstance(node, _COLLECTIONS):
        elements = [e.elts[0] if isinstance(e, ast.Tuple) and e.elts else e for e in node.elts]
    elif isinstance(node, ast.Dict):
        elements = [key for key in node.keys if key is not None]
    else:
        return None
    return [
        e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else None
        for e in elements
    ]


def _literals(node: ast.expr) -> Iterator[ast.expr]:
    """The literal collections in `node`, nested ones (a dict's values, a list's items)
    included."""
    if _members(node) is None:
        return
    yield node
    if isinstance(node, ast.Call):
        yield from _literals(node.args[0])
    elif isinstance(node, _COLLECTIONS):
        for element in node.elts:
            yield from _literals(element)
    elif isinstance(node, ast.Dict):
        for value in node.values:
            yield from _literals(value)


def _listed(members: list[str | None], what: str) -> list[str]:
    """The words of vocabulary `what` a collection lists, when it is a listing of them (at
    least `_FEWEST` of them, and all its members are words, or at least three are and they are
    at least half of it: a table of latency keys and throughput); else none (a row that names
    one or two words among other columns)."""
    found = [m for m in members if m in VOCABULARIES[what]]
    if len(found) < _FEWEST[what]:
        return []
    if len(found) == len(members) or len(found) >= 3 and 2 * len(found) >= len(members):
        return found
    return []


def _is_enum(node: ast.ClassDef) -> bool:
    names = [_dotted(base) or "" for base in node.bases]
    return any(name.endswith(("Enum", "Choices")) for name in names)


def second_definitions(source: str) -> Iterator[tuple[int, str, list[str]]]:
    """(line, what, words) of each place in `source` that defines words of the protocol's
    vocabularies again: a constant or an enum member assigned one (`QUEUED = "queued"`), an
    assignment of a literal collection that lists them (a tuple, list, set or dict, nested ones
    included), and a choices list (`choices=`, `enum=`)."""
    tree = ast.parse(source)
    enums = {
        id(statement)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and _is_enum(node)
        for statement in node.body
    }
    for node in ast.walk(tree):
        values: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            values.append(node.value)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                constant = id(node) in enums or any(
                    isinstance(t, ast.Name) and t.id.isupper() for t in targets
                )
                for what in _CONSTANTS:
                    if constant and value.value in VOCABULARIES[what]:
                        yield node.lineno, what, [value.value]
        elif isinstance(node, ast.keyword) and node.arg in ("choices", "enum"):
            values.append(node.value)
        for value in values:
            for literal in _literals(value):
                members = _members(literal)
                assert members is not None
                for what in VOCABULARIES:
                    listed = _listed(members, what)
                    if listed:
                        yield literal.lineno, what, listed


def test_statuses_devices_latency_keys_and_job_options_are_defined_once() -> None:
    """Only the protocol defines an evaluation's statuses, the devices, a result's latency keys
    and the job options; everywhere else reads them from it (`STATUSES`, `DEVICES`,
    `LOCAL_DEVICES`, `LATENCY_KEYS`, `JobOptions`)."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what} {', '.join(words)}"
        for path in _sources(*APPS)
        if ROOT / "predictors" / "protocol" not in path.parents
        for line, what, words in second_definitions(path.read_text())
    ]
    assert not found, "defined again outside predictors/protocol/:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'FINISHED = ("succeeded", "failed", "cancelled")',
        "class Evaluation:\n    QUEUED = 'queued'",
        "class Status(models.TextChoices):\n    running = 'running'",
        'STATUSES = [("queued", "Queued"), ("running", "Running")]',
        'device = serializers.ChoiceField(choices=["cpu", "gpu"])',
        'SETTINGS = {"ENUMS": {"DeviceEnum": ["cpu", "gpu"]}}',
        "DEVICES = frozenset({'cpu', 'cuda'})",
        'METRICS = ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "throughput_ips")',
        'REPRODUCED = ("split", "limit", "batch_sizes", "warmup", "repeat", "seed")',
        'options = {"warmup": 1, "repeat": 2, "seed": 0, "threads": 1, "limit": 9, "split": ""}',
    ],
)
def test_a_second_definition_is_found(source: str) -> None:
    assert list(second_definitions(source))


@pytest.mark.parametrize(
    "source",
    [
        'outcome = ("failed", reason)',
        'if status in ("failed", "cancelled"):\n    pass',
        "active = Q(status=RUNNING)\nPARTIAL = (FAILED, CANCELLED)",
        'COLUMNS = {"top1": "a", "model": "b", "framework": "c", "p50_ms": "d", "p99_ms": "e"}',
        'row = {"cpu": cpu_model, "gpu": gpu_model, "threads": 4, "seed": 0, "host": h, "x": 1}',
        'device = "cpu"',
        "class Error(StrEnum):\n    FINISHED = 'finished'",
        'SWEPT = ("threads", "seed")',
        'given = {"split": split}',
        'LATENCY_ONLY = "latency_only"',
    ],
)
def test_a_use_is_no_second_definition(source: str) -> None:
    assert not list(second_definitions(source))


def _job_option_fields(node: ast.ClassDef) -> list[str]:
    names = set(JobOptions.names())
    fields = []
    for statement in node.body:
        targets = (
            statement.targets
            if isinstance(statement, ast.Assign)
            else [statement.target]
            if isinstance(statement, ast.AnnAssign)
            else []
        )
        fields += [t.id for t in targets if isinstance(t, ast.Name) and t.id in names]
    return fields


def test_no_class_restates_the_job_options() -> None:
    """A form, serializer or options class of its own that declares the job options field by
    field restates `JobOptions` (and drifts from it): the launch request's fields, the form, the
    CLI's flags and the loop's options are made from it. A class may name a few options (a
    model's columns, a solver's constraints; LoadGen's settings as it ran them), not a third of
    them; the protocol's own records (the result's) are held to it too."""
    third = len(JobOptions.names()) / 3
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.name} ({len(fields)} options)"
        for path in _sources(*APPS)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name != "JobOptions"
        for fields in [_job_option_fields(node)]
        if len(fields) >= third
    ]
    assert not found, "job options restated field by field:\n" + "\n".join(found)


# -- sizes ----------------------------------------------------------------------------------------

# A module longer than this is more than one thing: split it into modules that say what they are.
MAX_MODULE_LINES = 800
# The evaluation loop's entry point reads as a list of named steps.
MAX_EVALUATE_LINES = 80


def test_no_product_module_is_over_800_lines() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {count} lines"
        for path in _sources(*APPS)
        if (count := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not found, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(found)


def test_evaluate_is_a_short_function() -> None:
    path = ROOT / "predictors" / "evaluation" / "run.py"
    tree = ast.parse(path.read_text())
    (evaluate,) = [
        node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "evaluate"
    ]
    assert evaluate.end_lineno is not None
    length = evaluate.end_lineno - evaluate.lineno + 1
    assert length < MAX_EVALUATE_LINES, f"evaluate is {length} lines"
