"""The zoo's text recognizer and its dataset: printed lines read back as text.

``text-transcripts``: printed English text lines (phrases of the Zen of Python, drawn as
``text-lines`` draws them: Pillow's own font at 18 to 39 px, dark ink on light paper with a
little noise), upright, each with its text; only lines at most 320/48 times as wide as they are
high, so that at the recognizer's height of 48 px every line fits its 320 px wide input and a
batch of any size stacks. PNG, 300 validation lines, seeded.

``text-recognizer``: PaddleOCR's PP-OCRv4 text recognizer (CRNN-style, CTC) as the
rapidocr-onnxruntime 1.4.4 wheel ships it (``models/ch_PP-OCRv4_rec_infer.onnx``, checked by its
SHA-256), with its charset written beside it (``charset.txt``): the graph keeps its 6,623
symbols in its own metadata (``character``, one per line), and rapidocr's ``CTCLabelDecode``
appends a space after them and puts the blank first, so that the graph's 6,625 classes are
blank, the 6,623 symbols and the space. The manifest names the file (``charset_path``) and
nothing else of rapidocr's code is needed.

Files, as ``predictors.zoo.build`` writes them:

- ``datasets/text-transcripts/1.0.0/validation.parquet``: ``image`` (PNG) and ``text``;
- ``models/text-recognizer/1.0.0/{text-recognizer.onnx,charset.txt}``.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from predictors.zoo.common import build_generated
from predictors.zoo.pretrained import Pretrained, package_file
from predictors.zoo.store import VERSION, Staging

DATASET = "text-transcripts"
MODEL = "text-recognizer"
SEED = 20261128
COUNT = 300
# The recognizer's input: 48 px high, at least 320 px wide.
HEIGHT, WIDTH = 48, 320

RECOGNIZER = Pretrained(
    name=MODEL,
    package="rapidocr-onnxruntime",
    version="1.4.4",
    module="rapidocr_onnxruntime",
    resource="models/ch_PP-OCRv4_rec_infer.onnx",
    sha256="48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
    file=f"{MODEL}.onnx",
    license="Apache-2.0",
)


def make_lines() -> tuple[list[bytes], list[str]]:
    """The validation lines as PNG files, and their texts."""
    from PIL import Image

    from predictors.zoo.datasets import text_line, zen_lines

    lines = [line.split() for line in zen_lines()]
    rng = np.random.default_rng(SEED)
    images: list[bytes] = []
    texts: list[str] = []
    while len(images) < COUNT:
        pixels, text = text_line(rng, lines[int(rng.integers(len(lines)))])
        height, width = pixels.shape[:2]
        if math.ceil(HEIGHT * width / height) > WIDTH:
            continue  # wider than the recognizer's input: drawn again
        buffer = io.BytesIO()
        Image.fromarray(pixels, mode="RGB").save(buffer, format="PNG")
        images.append(buffer.getvalue())
        texts.append(text)
    return images, texts


def build_dataset(store: str) -> dict:
    import pyarrow as pa

    images, texts = make_lines()
    return build_generated(
        store,
        DATASET,
        (),
        "png",
        lambda split: [("image", images, pa.binary()), ("text", texts, pa.string())],
        ("validation",),
    )


def charset_of(graph: bytes) -> list[str]:
    """The symbols of the recognizer's classes after the blank, in order: the graph's own
    `character` metadata, one symbol a line, then the space rapidocr appends."""
    import onnx

    model = onnx.load_from_string(graph)
    metadata = {entry.key: entry.value for entry in model.metadata_props}
    return [*metadata["character"].splitlines(), " "]


def build_model(store: str) -> dict:
    graph = package_file(RECOGNIZER)
    symbols = charset_of(graph)
    with Staging(Path(store), f"models/{MODEL}/{VERSION}") as staging:
        staging.write(RECOGNIZER.file, graph)
        staging.write("charset.txt", ("\n".join(symbols) + "\n").encode("utf-8"))
        files = staging.commit()
    return {
        "files": files,
        "trained": True,
        "symbols": len(symbols),
        "source": f"{RECOGNIZER.package}=={RECOGNIZER.version} ({RECOGNIZER.resource}, "
        f"{RECOGNIZER.license})",
    }
