"""The product's import graph has no cycle: read from the source (grimp), imports inside
functions included, so a circle cannot hide behind a lazy import. Imports under
`if TYPE_CHECKING:` are left out: they never run."""

from __future__ import annotations

import grimp
import pytest

APPS = ("hub", "evaluations", "traces", "frontend", "predictors", "mlmodelscope")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    graph = grimp.build_graph(*APPS, exclude_type_checking_imports=True, cache_dir=None)
    for module in list(graph.modules):
        if ".migrations" in module:  # Django's migrations import their app by design
            graph.remove_module(module)
    return graph


def cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """One shortest cycle through each import that closes one, each cycle once."""
    found: dict[frozenset[str], tuple[str, ...]] = {}
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                found.setdefault(frozenset(back), (importer, *back))
    return sorted(found.values())


def test_the_product_has_no_import_cycle(graph: grimp.ImportGraph) -> None:
    found = cycles(graph)
    assert not found, f"{len(found)} import cycles:\n" + "\n".join(" → ".join(c) for c in found)


def test_a_lazy_import_closing_a_circle_is_found() -> None:
    """The check sees an import inside a function: a graph with one such edge back is a
    cycle."""
    graph = grimp.ImportGraph()
    graph.add_import(importer="pkg.a", imported="pkg.b", line_number=3, line_contents="import b")
    assert cycles(graph) == []
    graph.add_import(
        importer="pkg.b", imported="pkg.a", line_number=40, line_contents="    from pkg import a"
    )
    assert cycles(graph) == [("pkg.a", "pkg.b", "pkg.a")]


# The rooms of `predictors/`, highest first: a room imports only rooms below it
# (docs/architecture.md, "predictors/, room by room").
ROOMS = (
    "cli",
    "agent",
    "zoo",
    "evaluation",
    "analysis",
    "frameworks",
    "host",
    "tracing",
    "data",
    "manifests",
    "processing",
    "broker",
    "tasks",
    "statistics",
    "protocol",
)


def layer_violations(graph: grimp.ImportGraph) -> list[str]:
    """Each import of a room by a room below it, with the chains that make it."""
    illegal = graph.find_illegal_dependencies_for_layers(layers=ROOMS, containers={"predictors"})
    return [
        f"{dependency.importer} → {dependency.imported}: "
        + "; ".join(" → ".join(route.heads) for route in dependency.routes)
        for dependency in sorted(illegal, key=lambda d: (d.importer, d.imported))
    ]


def test_the_rooms_of_predictors_are_layered(graph: grimp.ImportGraph) -> None:
    rooms = {module.split(".")[1] for module in graph.modules if module.startswith("predictors.")}
    assert rooms <= set(ROOMS), f"rooms of predictors/ not placed in ROOMS: {rooms - set(ROOMS)}"
    found = layer_violations(graph)
    assert not found, "a room imports a room above it:\n" + "\n".join(found)


def test_a_room_importing_one_above_it_is_found() -> None:
    graph = grimp.ImportGraph()
    graph.add_module("predictors")
    for room in ROOMS:
        graph.add_module(f"predictors.{room}")
    graph.add_import(importer="predictors.cli", imported="predictors.protocol")
    assert layer_violations(graph) == []
    graph.add_import(importer="predictors.tracing", imported="predictors.agent")
    assert len(layer_violations(graph)) == 1
