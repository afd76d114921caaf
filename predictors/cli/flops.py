"""`mlms flops`: a model's parameters and multiply-adds per layer and in total, in each framework
it has a manifest for, and whether the frameworks agree.

    mlms flops MODEL [--version RANGE] [--framework F[,F...]|all] [--input-size H,W]
                     [--input-shape D[,D...]] [--format table|json] [--manifests DIR]
                     [--store DIR]

The input's shape comes from the manifest (an image input's crop or resize size, channels and
layout; a tensor input's `shape`); `--input-size` sets an image's height and width (channels and
layout stay the manifest's), `--input-shape` a tensor input's whole shape (no batch axis). The
counts are per input (batch size 1); see `predictors.analysis.flops` for what is counted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from predictors.analysis.flops import Count, CountError, count, model_input_shape, si
from predictors.cli.args import CommandError, UsageError, check_store, frameworks, integers, table
from predictors.data import DataManager
from predictors.manifests import Manifest
from predictors.manifests.catalog import DEFAULT_ROOT, Catalog
from predictors.processing.text import DEFAULT_ELEMENT_TYPE, TextFeeds
from predictors.tasks import data_input_name, data_inputs
from predictors.zoo.build import default_store

__all__ = ["add_commands", "run"]


def add_commands(commands: Any) -> None:
    flops = commands.add_parser(
        "flops",
        help="count a model's parameters and multiply-adds per layer, in each framework",
        description="Count MODEL's parameters and multiply-adds (MACs; FLOPs are twice that) "
        "per layer and in total from its graph, in each framework given, at one input's shape "
        "(batch size 1), and say whether the frameworks agree layer by layer.",
    )
    flops.add_argument("model", metavar="MODEL", help="model name, e.g. resnet-18")
    flops.add_argument("--version", default="*", metavar="RANGE", help="npm version range")
    flops.add_argument(
        "--framework",
        default="all",
        metavar="F[,F...]",
        help="comma-separated frameworks, or 'all' for every framework the model has a "
        "manifest for (default: all)",
    )
    flops.add_argument(
        "--input-size",
        metavar="H,W",
        help="an image input's height and width (default: the manifest's crop or resize size)",
    )
    flops.add_argument(
        "--input-shape",
        metavar="D[,D...]",
        help="a tensor input's shape without the batch axis (default: the manifest's shape)",
    )
    flops.add_argument("--format", choices=("table", "json"), default="table")
    flops.add_argument("--manifests", type=Path, default=None)
    flops.add_argument("--store", type=Path, default=None)


def _integers(text: str, flag: str, length: int | None = None) -> list[int]:
    values = integers(text, flag)
    if length is not None and len(values) != length:
        raise UsageError(f"{flag}: give {length} integers (got {text!r})")
    if any(value > 16384 for value in values):
        raise UsageError(f"{flag}: {text!r} has a side over 16384")
    return values


def input_shape(model: Manifest, size: list[int] | None, shape: list[int] | None) -> list[int]:
    """One input's shape (no batch axis) for `model`, from its manifest and the flags."""
    name = data_input_name(model.data)
    spec = next(i for i in model.data.get("inputs") or [] if i.get("name") == name)
    parameters = spec.get("parameters") or {}
    where = f"{model.name} {model.version} ({model.framework})"
    if spec.get("type") == "image":
        if shape is not None:
            raise UsageError(f"--input-shape: {where} takes an image: give --input-size H,W")
        if size is not None:
            parameters = {**parameters, "crop_size": size, "resize_side": None, "pad": None}
        found = model_input_shape(parameters)
        if found is None:
            raise CommandError(
                f"{where}: its input's size depends on each image: give --input-size H,W"
            )
        return found
    if size is not None:
        raise UsageError(f"--input-size: {where} takes a tensor: give --input-shape")
    if shape is not None:
        return shape
    if spec.get("type") == "text" and isinstance(parameters.get("max_length"), int):
        return [int(parameters["max_length"])]  # a row of max_length token ids
    declared = parameters.get("shape")
    if not declared or not all(isinstance(d, int) and d > 0 for d in declared):
        raise CommandError(f"{where}: its input has no fixed shape: give --input-shape")
    return [int(d) for d in declared]


def counts(args: argparse.Namespace) -> list[tuple[Manifest, Count]]:
    catalog = Catalog(args.manifests or DEFAULT_ROOT)
    size = _integers(args.input_size, "--input-size", 2) if args.input_size else None
    shape = _integers(args.input_shape, "--input-shape") if args.input_shape else None
    models = [
        catalog.find_model(args.model, args.version, name)
        for name in frameworks(args.framework, catalog, args.model, args.version)
    ]
    store = (args.store or default_store()).resolve()
    check_store(store, models, "")
    fetch = DataManager(store_dir=store).fetch
    found = []
    for model in models:
        columns = data_inputs(model.data)
        if len(columns) > 1:
            raise CommandError(
                f"{model.name} ({model.framework}) takes several inputs from the dataset's "
                f"columns ({', '.join(str(i.get('name')) for i in columns)}); mlms flops counts "
                "models of one input"
            )
        graph = model.data["model"]
        graph_file = fetch(graph["graph_path"], graph.get("graph_sha256"))
        name = data_input_name(model.data)
        spec = next(i for i in model.data.get("inputs") or [] if i.get("name") == name)
        # Token ids are integers (0 is an id); other inputs are counted at float32.
        element_type = (
            str((spec.get("parameters") or {}).get("element_type") or DEFAULT_ELEMENT_TYPE)
            if spec.get("type") == "text"
            else "float32"
        )
        # A text's features are rows of its length beside its ids (`TextFeeds`).
        feeds = TextFeeds.of(model.data.get("inputs") or [])
        names = feeds.names if feeds is not None else [name]
        shapes = dict.fromkeys(names, input_shape(model, size, shape))
        try:
            found.append(
                (
                    model,
                    count(model.framework, graph_file, shapes, element_type),
                )
            )
        except CountError as exc:
            raise CommandError(f"{model.name} ({model.framework}): {exc}") from None
    return found


def agreement(found: list[Count]) -> dict[str, Any]:
    """Whether the counts agree: in total, and layer by layer, matched by module path where
    every framework keeps the same ones, else in the order the layers run."""
    totals = sorted({c.macs for c in found})
    if len(found) < 2:
        return {"frameworks": len(found), "totals_agree": True, "layers_matched": None}
    working = [[layer for layer in c.layers if layer.macs] for c in found]
    # A module's multiply-adds summed: ONNX may split one module into several nodes
    # (`/attn/MatMul`, `/attn/MatMul_1`) that TorchScript counts as one layer.
    modules = [_by_module(layers) for layers in working]
    if all(m.keys() == modules[0].keys() for m in modules):
        matched = "module"
        agree = all(m == modules[0] for m in modules)
    elif all(len(layers) == len(working[0]) for layers in working):
        matched = "order"
        agree = all(
            [layer.macs for layer in layers] == [layer.macs for layer in working[0]]
            for layers in working
        )
    else:
        matched, agree = None, False
    return {
        "frameworks": len(found),
        "totals_agree": len(totals) == 1,
        "layers_matched": matched,
        "layers_agree": agree if matched else None,
        "layers": len(working[0]),
    }


def _by_module(layers: list[Any]) -> dict[str, int]:
    summed: dict[str, int] = {}
    for layer in layers:
        summed[layer.module] = summed.get(layer.module, 0) + layer.macs
    return summed


def format_table(report: dict[str, Any]) -> str:
    results = report["counts"]
    first = results[0]
    lines = [
        f"{report['model']['name']} {report['model']['version']}: one input of shape "
        f"{first['input_shapes']} (batch size 1); FLOPs are twice the multiply-adds",
        "",
    ]
    rows = [["framework", "multiply-adds", "FLOPs", "parameters", "layers"]]
    for result in results:
        rows.append(
            [
                result["framework"],
                si(result["macs"]),
                si(result["flops"]),
                f"{result['params']:,}",
                str(sum(1 for layer in result["layers"] if layer["macs"])),
            ]
        )
    lines += [table(rows), ""]
    # Per layer: the first framework's layers; the others' multiply-adds beside them.
    by_module: list[dict[str, dict[str, Any]]] = []
    for result in results[1:]:
        summed: dict[str, dict[str, Any]] = {}
        for layer in result["layers"]:
            entry = summed.setdefault(layer["module"], {**layer, "macs": 0})
            entry["macs"] += layer["macs"]
        by_module.append(summed)
    # Where the module paths differ (Keras names its layers its own way), the layers that
    # multiply-add are lined up in the order they run, as `agreement` matched them.
    working = [[layer for layer in result["layers"] if layer["macs"]] for result in results]
    in_order = report["agreement"].get("layers_matched") == "order"
    header = ["layer", "type", f"MACs ({first['framework']})"]
    header += [f"MACs ({result['framework']})" for result in results[1:]]
    header += ["parameters", "FLOP/byte"]
    by_layer = [header]
    for layer in first["layers"]:
        # Across frameworks a layer is its module path; alone, the name its trace gives it.
        name = layer["module"] if by_module else layer["name"]
        row = [name, layer["op_type"], si(layer["macs"])]
        for index, others in enumerate(by_module, start=1):
            other = others.get(layer["module"])
            if in_order and layer["macs"]:
                other = working[index][working[0].index(layer)]
            row.append(si(other["macs"]) if other else "—")
        intensity = layer["intensity"]
        row += [f"{layer['params']:,}", f"{intensity:.1f}" if intensity is not None else "—"]
        by_layer.append(row)
    lines.append(table(by_layer))
    for result in results:
        if result.get("uncounted_layers"):
            lines.append(
                f"{result['framework']}: {len(result['uncounted_layers'])} layers that multiply-"
                "add have shapes onnx could not infer and count 0 (the total is a lower bound): "
                + ", ".join(result["uncounted_layers"][:5])
            )
    agree = report["agreement"]
    if agree["frameworks"] > 1:
        lines.append("")
        totals = "agree" if agree["totals_agree"] else "DIFFER"
        if agree["layers_matched"] is None:
            layers = "the layers cannot be matched across the frameworks"
        else:
            verdict = "agree" if agree["layers_agree"] else "DIFFER"
            layers = (
                f"the {agree['layers']} layers that multiply-add, matched by "
                f"{agree['layers_matched']}, {verdict}"
            )
        lines.append(f"Across {agree['frameworks']} frameworks: the totals {totals}; {layers}.")
        if len({result["params"] for result in results}) > 1:
            lines.append(
                "The parameter totals differ: an exporter may fold normalization into the "
                "convolutions before it, and an ONNX file keeps equal constants once."
            )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> str:
    found = counts(args)
    model = found[0][0]
    report = {
        "model": {"name": model.name, "version": model.version},
        "counts": [c.as_dict() for _, c in found],
        "agreement": agreement([c for _, c in found]),
    }
    if args.format == "json":
        return json.dumps(report, indent=2)
    return format_table(report)
