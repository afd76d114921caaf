"""Text inputs (`type: text`): a string, tokenised by the tokenizer file the manifest names
(a Hugging Face `tokenizers` JSON file, `tokenizer.json`, read and applied by that library),
fed to the model as a row of token ids.

Parameters:

- `tokenizer_path` (required): a repo:// or https:// tokenizer file (`tokenizers`'
  `Tokenizer.to_file` / `save_pretrained` writes one); an https:// file needs
  `tokenizer_sha256`;
- `max_length` (required): the row's length: longer texts are truncated by the tokenizer's
  own truncation (special tokens kept), shorter ones padded up to it;
- `pad_id`: the id padding takes; by default the tokenizer file's own (its `padding`), and a
  file that configures none needs it;
- `add_special_tokens` (default true): whether the tokenizer's post-processor adds its special
  tokens (`[CLS]`, `[SEP]`, `<s>`, …), as `Tokenizer.encode` does;
- `element_type` (default `int64`): `int64` or `int32`.

An input is a (max_length,) array of ids; a batch is (N, max_length). The dataset of such a
model has `encoding: text`: its `input` column holds each row's text (a string, or UTF-8
bytes). Whatever the tokenizer does besides (normalising, pre-tokenising, the model's
vocabulary) is the file's, applied as `tokenizers` applies it.

Several inputs from one text (`type: text_feature`): what else the tokenizer gives of each
text, row for row with its ids, fed to inputs of the model's own: `attention_mask` (1 for a
token, 0 for padding), `type_ids` (the segment of each token, BERT's `token_type_ids`; the
file's `pad_type_id` for padding) and `special_tokens_mask` (1 for a special token the
post-processor added, and for padding). Parameters: `feature` (required) and `element_type`
(default the text input's). A model with such inputs gets its rows packed, (N, 1 + F,
max_length) int64: the ids first, then each feature in the order of the manifest's inputs
(`TextFeeds`), taken apart into the model's inputs, each of its own type, by the predictor
(`predictors.frameworks.feeds.SeveralFeeds`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from predictors.processing.parameters import ProcessingError, input_keys
from predictors.tasks import TEXT_FEATURE

PARAMETERS = (
    "tokenizer_path",
    "tokenizer_sha256",
    "max_length",
    "pad_id",
    "add_special_tokens",
    "element_type",
)
REQUIRED = ("tokenizer_path", "max_length")
TEXT_ELEMENT_TYPES: dict[str, type[np.integer]] = {"int64": np.int64, "int32": np.int32}
DEFAULT_ELEMENT_TYPE = "int64"
# The longest row of ids, and the largest tokenizer file read.
MAX_LENGTH = 8192
MAX_TOKENIZER_BYTES = 64 << 20
# A text longer than this (in characters) is refused before it is tokenised.
MAX_TEXT_CHARACTERS = 1 << 20

Fetch = Callable[[str, str | None], Path]


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_parameters(parameters: Any) -> None:
    """What the parameters must be, before the tokenizer file is read (ProcessingError naming
    the parameter)."""
    if not isinstance(parameters, Mapping):
        raise ProcessingError("text input parameters must be a mapping")
    input_keys("text", parameters, PARAMETERS, REQUIRED)
    length = parameters["max_length"]
    if not _integer(length) or not 1 <= length <= MAX_LENGTH:
        raise ProcessingError(
            f"input parameter 'max_length' must be an integer from 1 to {MAX_LENGTH} (the "
            f"row of token ids each text becomes); got {length!r}",
            parameter="max_length",
        )
    pad = parameters.get("pad_id")
    if pad is not None and (not _integer(pad) or pad < 0):
        raise ProcessingError(
            f"input parameter 'pad_id' must be a token id (an integer from 0); got {pad!r}",
            parameter="pad_id",
        )
    special = parameters.get("add_special_tokens", True)
    if not isinstance(special, bool):
        raise ProcessingError(
            f"input parameter 'add_special_tokens' must be true or false; got {special!r}",
            parameter="add_special_tokens",
        )
    element_type = parameters.get("element_type", DEFAULT_ELEMENT_TYPE)
    if element_type not in TEXT_ELEMENT_TYPES:
        raise ProcessingError(
            "input parameter 'element_type' of a text input must be one of "
            f"{', '.join(TEXT_ELEMENT_TYPES)}; got {element_type!r}",
            parameter="element_type",
        )


@dataclass(frozen=True)
class TextFeeds:
    """The inputs a model takes from one text: its ids, then each text_feature input, by name,
    feature and element type. `unpack` takes a packed batch (`TextPreprocessor.batch`) apart
    into them."""

    ids: str
    ids_type: str
    features: tuple[tuple[str, str, str], ...]

    @classmethod
    def of(cls, inputs: Sequence[Mapping[str, Any]]) -> TextFeeds | None:
        """The feeds of a model's inputs (checked by the schema and the rules): None where it
        has no text_feature input (its ids are fed as they are)."""
        text = next((i for i in inputs if i.get("type") == "text"), None)
        features = [i for i in inputs if i.get("type") == TEXT_FEATURE]
        if text is None or not features:
            return None
        ids_type = str((text.get("parameters") or {}).get("element_type", DEFAULT_ELEMENT_TYPE))
        return cls(
            str(text["name"]),
            ids_type,
            tuple(
                (
                    str(entry["name"]),
                    str(entry["parameters"]["feature"]),
                    str(entry["parameters"].get("element_type", ids_type)),
                )
                for entry in features
            ),
        )

    @property
    def names(self) -> list[str]:
        return [self.ids, *(name for name, _, _ in self.features)]

    def is_packed(self, batch: Any) -> bool:
        """Whether `batch` is a packed batch (rather than the ids alone)."""
        return isinstance(batch, np.ndarray) and batch.ndim == 3

    def unpack(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        """A packed batch (N, 1 + F, L) as the model's inputs, each (N, L) of its own type."""
        if batch.ndim != 3 or batch.shape[1] != len(self.names):
            raise ProcessingError(
                f"a batch of texts' ids and features is (N, {len(self.names)}, length) "
                f"({', '.join(self.names)}); got {tuple(batch.shape)}"
            )
        types = [self.ids_type, *(element_type for _, _, element_type in self.features)]
        return {
            name: batch[:, index].astype(TEXT_ELEMENT_TYPES[element_type])
            for index, (name, element_type) in enumerate(zip(self.names, types, strict=True))
        }


def tokenizer_call(call: Callable[[], Any], what: str) -> Any:
    """`call()`, a call into `tokenizers`; what it raises is a ProcessingError naming
    `tokenizer_path`: its own errors, and the panics of its Rust core (pyo3's PanicException, a
    BaseException), which a crafted file can cause and which would otherwise end the process."""
    try:
        return call()
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - see the docstring
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ProcessingError(f"{what}: {detail[:500]}", parameter="tokenizer_path") from None


def load_tokenizer(path: Path) -> Any:
    """A `tokenizers.Tokenizer` read from `path`; ProcessingError naming `tokenizer_path`
    where the file is too large or not a tokenizer."""
    from tokenizers import Tokenizer

    size = path.stat().st_size
    if size > MAX_TOKENIZER_BYTES:
        raise ProcessingError(
            f"the tokenizer file is {size} bytes, more than {MAX_TOKENIZER_BYTES}",
            parameter="tokenizer_path",
        )
    return tokenizer_call(
        lambda: Tokenizer.from_file(str(path)), "the tokenizer file is not a tokenizers JSON file"
    )


class TextPreprocessor:
    """Texts into rows of token ids (see the module docstring). `fetch(url, sha256)` brings
    the tokenizer file; `feeds`, where the model takes features of the text besides its ids,
    makes each batch the packed rows of them all."""

    def __init__(
        self, parameters: Mapping[str, Any], fetch: Fetch, feeds: TextFeeds | None = None
    ) -> None:
        check_parameters(parameters)
        self.feeds = feeds
        self.max_length: int = parameters["max_length"]
        self.add_special_tokens: bool = parameters.get("add_special_tokens", True)
        self.element_type: str = parameters.get("element_type", DEFAULT_ELEMENT_TYPE)
        self.dtype = np.dtype(TEXT_ELEMENT_TYPES[self.element_type])
        path = fetch(parameters["tokenizer_path"], parameters.get("tokenizer_sha256"))
        tokenizer = load_tokenizer(Path(path))
        # The largest id (added tokens may take ids past the vocabulary's size).
        largest = max(
            tokenizer_call(
                lambda: tokenizer.get_vocab(with_added_tokens=True), "the tokenizer failed"
            ).values(),
            default=-1,
        )
        pad = parameters.get("pad_id")
        if pad is None:
            padding = tokenizer.padding
            if not padding:
                raise ProcessingError(
                    "the tokenizer file configures no padding: give the input parameter "
                    "pad_id (the id padding takes)",
                    parameter="pad_id",
                )
            pad = int(padding["pad_id"])
        if pad > largest:
            raise ProcessingError(
                f"input parameter 'pad_id' is {pad}, beyond the tokenizer's ids (0 to {largest})",
                parameter="pad_id",
            )
        if np.iinfo(self.dtype).max < largest:
            raise ProcessingError(
                f"element_type {self.element_type} cannot hold the tokenizer's ids (0 to "
                f"{largest})",
                parameter="element_type",
            )
        self.pad_id: int = pad
        special = (
            tokenizer_call(
                lambda: tokenizer.num_special_tokens_to_add(False), "the tokenizer failed"
            )
            if self.add_special_tokens
            else 0
        )
        if self.max_length <= special:
            raise ProcessingError(
                f"input parameter 'max_length' is {self.max_length}, but the tokenizer adds "
                f"{special} special tokens to every text: give more (or add_special_tokens: "
                "false)",
                parameter="max_length",
            )
        # The file's own directions (left padding, left truncation) are kept; the length is
        # max_length.
        padding, truncation = tokenizer.padding or {}, tokenizer.truncation or {}
        tokenizer_call(
            lambda: tokenizer.enable_truncation(
                max_length=self.max_length,
                direction=str(truncation.get("direction") or "right").lower(),
            ),
            "the tokenizer cannot truncate",
        )
        tokenizer_call(
            lambda: tokenizer.enable_padding(
                length=self.max_length,
                pad_id=pad,
                pad_token=tokenizer.id_to_token(pad) or "[PAD]",
                direction=str(padding.get("direction") or "right").lower(),
                pad_type_id=int(padding.get("pad_type_id") or 0),
            ),
            "the tokenizer cannot pad",
        )
        self.tokenizer = tokenizer

    @staticmethod
    def text(value: Any) -> str:
        """A row's text: a string, or UTF-8 bytes."""
        if isinstance(value, str):
            data = value
        elif isinstance(value, bytes | bytearray | memoryview):
            try:
                data = bytes(value).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ProcessingError(
                    f"a text input takes UTF-8 text; byte {exc.start} is not UTF-8"
                ) from None
        else:
            raise ProcessingError(f"a text input takes a string; got {type(value).__name__}")
        if len(data) > MAX_TEXT_CHARACTERS:
            raise ProcessingError(
                f"a text input is {len(data)} characters, more than {MAX_TEXT_CHARACTERS}"
            )
        return data

    def __call__(self, value: Any) -> np.ndarray:
        return self.batch([value])[0]

    def batch(self, values: Sequence[Any]) -> np.ndarray:
        if not values:
            raise ProcessingError("a batch needs at least one text")
        texts = [self.text(value) for value in values]
        encodings = tokenizer_call(
            lambda: self.tokenizer.encode_batch(texts, add_special_tokens=self.add_special_tokens),
            "the tokenizer cannot tokenise the text",
        )
        rows = [encoding.ids for encoding in encodings]
        lengths = sorted({len(row) for row in rows})
        if lengths != [self.max_length]:
            raise ProcessingError(
                f"the tokenizer made rows of {', '.join(map(str, lengths))} ids, not max_length "
                f"({self.max_length})",
                parameter="tokenizer_path",
            )
        if self.feeds is None:
            return np.array(rows, dtype=self.dtype)
        # Each text's ids, then each feature the model takes, row for row (`TextFeeds`).
        features = [feature for _, feature, _ in self.feeds.features]
        return np.array(
            [
                [ids, *(getattr(encoding, feature) for feature in features)]
                for ids, encoding in zip(rows, encodings, strict=True)
            ],
            dtype=np.int64,
        )
