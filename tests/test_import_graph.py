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
