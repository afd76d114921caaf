"""The zoo's file-type classifier and its dataset: files told apart by their raw bytes.

``file-types``: files of 16 content types made locally with the standard library and Pillow
from a seeded RNG (source code in Python, JavaScript, C and shell, JSON, CSV, XML, HTML and
Markdown documents, PNG, JPEG and GIF images, ZIP and gzip archives, PDF documents and SQLite
databases), 20 of each, every one at least ``MIN_SIZE`` bytes once its whitespace is stripped,
far above the classifier's ``min_file_size_for_dl`` (8 bytes), under which Magika decides by
rules without its model. Each row's ``image`` holds the file's bytes as they are (``encoding:
raw``) and its ``label`` the index of its type among the model's 214 (Magika's content type
names, in the model's output order).

``file-type``: Google's Magika (standard_v3_3) as the magika 1.0.3 wheel ships it
(``magika/models/standard_v3_3/model.onnx``, checked by its SHA-256), with its labels written
beside it (``labels.txt``, the ``target_labels_space`` of the wheel's ``config.min.json``, the
model's output order). The manifest's ``type: bytes`` input is Magika's own feature extraction
(``predictors.processing.raw_bytes``).

Files, as ``predictors.zoo.build`` writes them:

- ``datasets/file-types/1.0.0/validation.parquet``: ``image`` (the file's bytes) and ``label``;
- ``models/file-type/1.0.0/{file-type.onnx,labels.txt}``.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import sqlite3
import tempfile
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING
from xml.etree import ElementTree

import numpy as np

from predictors.zoo.common import build_generated, labels_text
from predictors.zoo.pretrained import Pretrained, PretrainedError, package_file
from predictors.zoo.store import VERSION, Staging

if TYPE_CHECKING:
    from PIL.Image import Image

DATASET = "file-types"
MODEL = "file-type"
SEED = 20261129
PER_TYPE = 20
# The fewest bytes a file has once stripped of whitespace.
MIN_SIZE = 256

CLASSIFIER = Pretrained(
    name=MODEL,
    package="magika",
    version="1.0.3",
    module="magika",
    resource="models/standard_v3_3/model.onnx",
    sha256="fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
    file=f"{MODEL}.onnx",
    license="Apache-2.0",
)
CONFIG = "models/standard_v3_3/config.min.json"

Rng = np.random.Generator

WORDS = (
    "alpha beta gamma delta value count total index item record name title price amount "
    "width height color size order user account message status result buffer queue cache "
    "node edge graph table column row field token parser reader writer stream socket server "
    "client request response config option layer model batch sample score label"
).split()


def _word(rng: Rng) -> str:
    return WORDS[int(rng.integers(len(WORDS)))]


def _words(rng: Rng, low: int, high: int) -> str:
    return " ".join(_word(rng) for _ in range(int(rng.integers(low, high))))


def _name(rng: Rng) -> str:
    return f"{_word(rng)}_{_word(rng)}"


def _camel(rng: Rng) -> str:
    return _word(rng) + _word(rng).capitalize()


def python_source(rng: Rng) -> bytes:
    lines = ['"""' + _words(rng, 5, 12).capitalize() + '."""', "", "import os", "import sys", ""]
    for _ in range(int(rng.integers(2, 5))):
        name, arg = _name(rng), _word(rng)
        lines += [
            f"def {name}({arg}, limit=10):",
            f'    """{_words(rng, 4, 9).capitalize()}."""',
            "    result = []",
            f"    for item in {arg}:",
            "        if item is None or len(result) >= limit:",
            "            continue",
            f"        result.append(item * {int(rng.integers(2, 9))})",
            "    return result",
            "",
            "",
        ]
    lines += ['if __name__ == "__main__":', f"    print({_name(rng)}(sys.argv[1:]))", ""]
    return "\n".join(lines).encode()


def javascript_source(rng: Rng) -> bytes:
    lines = ["'use strict';", "", "const fs = require('fs');", ""]
    names = []
    for _ in range(int(rng.integers(2, 5))):
        name, arg = _camel(rng), _word(rng)
        names.append(name)
        lines += [
            f"function {name}({arg}, options = {{}}) {{",
            f"  const total = {arg}.map((x) => x * {int(rng.integers(2, 9))});",
            "  if (!options.quiet) {",
            f"    console.log('{_words(rng, 2, 5)}', total.length);",
            "  }",
            "  return total.filter((x) => x !== undefined);",
            "}",
            "",
        ]
    lines += [f"module.exports = {{ {', '.join(names)} }};", ""]
    return "\n".join(lines).encode()


def c_source(rng: Rng) -> bytes:
    lines = ["#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>", ""]
    names = []
    for _ in range(int(rng.integers(2, 4))):
        name = _name(rng)
        names.append(name)
        lines += [
            f"static int {name}(const int *values, size_t count) {{",
            "    int total = 0;",
            "    for (size_t i = 0; i < count; i++) {",
            f"        total += values[i] * {int(rng.integers(2, 9))};",
            "    }",
            "    return total;",
            "}",
            "",
        ]
    lines += [
        "int main(int argc, char **argv) {",
        f"    int values[{int(rng.integers(3, 9))}] = {{0}};",
        *(f'    printf("%d\\n", {name}(values, argc));' for name in names),
        "    return EXIT_SUCCESS;",
        "}",
        "",
    ]
    return "\n".join(lines).encode()


def shell_script(rng: Rng) -> bytes:
    lines = ["#!/bin/bash", "set -euo pipefail", "", f'DIR="${{1:-/tmp/{_word(rng)}}}"', ""]
    for _ in range(int(rng.integers(2, 4))):
        lines += [
            f'for f in "$DIR"/*.{_word(rng)[:3]}; do',
            '    if [ -f "$f" ]; then',
            f'        echo "{_words(rng, 2, 5)}: $f"',
            f'        cp "$f" "$DIR/{_word(rng)}/"',
            "    fi",
            "done",
            "",
        ]
    lines += ['echo "done"', "exit 0", ""]
    return "\n".join(lines).encode()


def _record(rng: Rng, depth: int = 0) -> dict:
    record: dict = {}
    for _ in range(int(rng.integers(3, 7))):
        kind = int(rng.integers(4 if depth < 2 else 3))
        key = _name(rng)
        if kind == 0:
            record[key] = int(rng.integers(0, 10000))
        elif kind == 1:
            record[key] = _words(rng, 1, 4)
        elif kind == 2:
            record[key] = [round(float(v), 3) for v in rng.random(int(rng.integers(2, 5)))]
        else:
            record[key] = _record(rng, depth + 1)
    return record


def json_document(rng: Rng) -> bytes:
    items = [_record(rng) for _ in range(int(rng.integers(2, 5)))]
    return json.dumps({"version": 1, "items": items}, indent=2).encode()


def csv_table(rng: Rng) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["id", _word(rng), _word(rng), "amount", "date"])
    for row in range(int(rng.integers(12, 30))):
        writer.writerow(
            [
                row + 1,
                _word(rng),
                _words(rng, 1, 3),
                f"{float(rng.random() * 1000):.2f}",
                f"2024-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 29)):02d}",
            ]
        )
    return buffer.getvalue().encode()


def xml_document(rng: Rng) -> bytes:
    root = ElementTree.Element("catalog", {"version": "1.0"})
    for index in range(int(rng.integers(4, 9))):
        item = ElementTree.SubElement(root, "item", {"id": str(index + 1)})
        for _ in range(int(rng.integers(2, 4))):
            ElementTree.SubElement(item, _word(rng)).text = _words(rng, 1, 4)
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def html_page(rng: Rng) -> bytes:
    title = _words(rng, 2, 5).title()
    body = "\n".join(
        f'    <p class="{_word(rng)}">{_words(rng, 8, 20).capitalize()}.</p>'
        for _ in range(int(rng.integers(2, 6)))
    )
    links = "\n".join(
        f'      <li><a href="/{_word(rng)}.html">{_words(rng, 1, 3)}</a></li>'
        for _ in range(int(rng.integers(2, 5)))
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n  <head>\n    <meta charset="utf-8">\n'
        f"    <title>{title}</title>\n  </head>\n  <body>\n    <h1>{title}</h1>\n{body}\n"
        f"    <ul>\n{links}\n    </ul>\n  </body>\n</html>\n"
    ).encode()


def markdown_document(rng: Rng) -> bytes:
    lines = [f"# {_words(rng, 2, 5).title()}", ""]
    for _ in range(int(rng.integers(2, 4))):
        lines += [f"## {_words(rng, 1, 4).title()}", "", _words(rng, 12, 30).capitalize() + ".", ""]
        lines += [
            f"- **{_word(rng)}**: {_words(rng, 3, 8)}" for _ in range(int(rng.integers(2, 5)))
        ]
        lines += [
            "",
            f"See [{_word(rng)}](https://example.com/{_word(rng)}) and `{_name(rng)}`.",
            "",
        ]
    return "\n".join(lines).encode()


def _picture(rng: Rng) -> Image:
    from PIL import Image, ImageDraw

    width, height = (int(v) for v in rng.integers(24, 96, 2))
    image = Image.new("RGB", (width, height), tuple(int(v) for v in rng.integers(0, 256, 3)))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(2, 6))):
        x, y = int(rng.integers(width)), int(rng.integers(height))
        corners = (x, y, x + int(rng.integers(4, 30)), y + int(rng.integers(4, 30)))
        draw.rectangle(corners, fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    noise = rng.integers(-12, 13, (height, width, 3))
    pixels = np.clip(np.asarray(image, np.int16) + noise, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels)


def _image_file(rng: Rng, kind: str) -> bytes:
    buffer = io.BytesIO()
    _picture(rng).save(buffer, format=kind)
    return buffer.getvalue()


def png_image(rng: Rng) -> bytes:
    return _image_file(rng, "PNG")


def jpeg_image(rng: Rng) -> bytes:
    return _image_file(rng, "JPEG")


def gif_image(rng: Rng) -> bytes:
    return _image_file(rng, "GIF")


def zip_archive(rng: Rng) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for _ in range(int(rng.integers(2, 5))):
            info = zipfile.ZipInfo(f"{_word(rng)}/{_name(rng)}.txt", (2024, 1, 1, 0, 0, 0))
            archive.writestr(info, _words(rng, 40, 120), zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def gzip_archive(rng: Rng) -> bytes:
    return gzip.compress(csv_table(rng) + _words(rng, 50, 150).encode(), mtime=0)


def pdf_document(rng: Rng) -> bytes:
    """A one-page PDF that shows a few lines of text, with its cross-reference table."""
    text = " ".join(f"({_words(rng, 3, 8)}) Tj 0 -16 Td" for _ in range(int(rng.integers(3, 8))))
    stream = f"BT /F1 12 Tf 72 720 Td {text} ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def sqlite_database(rng: Rng) -> bytes:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "data.sqlite"
        connection = sqlite3.connect(path)
        with connection:
            table = _name(rng)
            connection.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name TEXT, v REAL)")
            connection.executemany(
                f"INSERT INTO {table} (name, v) VALUES (?, ?)",  # noqa: S608 (a name of WORDS)
                [(_words(rng, 1, 3), float(rng.random())) for _ in range(int(rng.integers(5, 40)))],
            )
        connection.close()
        return path.read_bytes()


# Each type the dataset holds: Magika's content type name and the maker of one file.
MAKERS: dict[str, Callable[[Rng], bytes]] = {
    "python": python_source,
    "javascript": javascript_source,
    "c": c_source,
    "shell": shell_script,
    "json": json_document,
    "csv": csv_table,
    "xml": xml_document,
    "html": html_page,
    "markdown": markdown_document,
    "png": png_image,
    "jpeg": jpeg_image,
    "gif": gif_image,
    "zip": zip_archive,
    "gzip": gzip_archive,
    "pdf": pdf_document,
    "sqlite": sqlite_database,
}


def model_labels() -> list[str]:
    """The classifier's labels in its output order: `target_labels_space` of the wheel's
    config."""
    try:
        distribution = metadata.distribution(CLASSIFIER.package)
    except metadata.PackageNotFoundError:
        raise PretrainedError(
            f"{MODEL}'s labels come from the PyPI package {CLASSIFIER.package}=="
            f"{CLASSIFIER.version}, which is not installed: run `make venv`"
        ) from None
    config = Path(str(distribution.locate_file(f"{CLASSIFIER.module}/{CONFIG}")))
    return list(json.loads(config.read_text(encoding="utf-8"))["target_labels_space"])


def make_files(labels: list[str]) -> tuple[list[bytes], list[int]]:
    """The dataset's files and their class indices among `labels`, type by type."""
    rng = np.random.default_rng(SEED)
    files: list[bytes] = []
    classes: list[int] = []
    for name, make in MAKERS.items():
        made = 0
        while made < PER_TYPE:
            data = make(rng)
            if len(data.strip()) < MIN_SIZE:
                continue  # too small to be told apart by its bytes: made again
            files.append(data)
            classes.append(labels.index(name))
            made += 1
    return files, classes


def build_dataset(store: str) -> dict:
    import pyarrow as pa

    labels = model_labels()
    files, classes = make_files(labels)
    return build_generated(
        store,
        DATASET,
        labels,
        "raw",
        lambda split: [("image", files, pa.binary()), ("label", classes, pa.int64())],
        ("validation",),
        types=list(MAKERS),
    )


def build_model(store: str) -> dict:
    graph = package_file(CLASSIFIER)
    labels = model_labels()
    with Staging(Path(store), f"models/{MODEL}/{VERSION}") as staging:
        staging.write(CLASSIFIER.file, graph)
        staging.write("labels.txt", labels_text(labels))
        files = staging.commit()
    return {
        "files": files,
        "trained": True,
        "labels": len(labels),
        "source": f"{CLASSIFIER.package}=={CLASSIFIER.version} ({CLASSIFIER.resource}, "
        f"{CLASSIFIER.license})",
    }
