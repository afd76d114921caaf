"""Reading an output of type `token_ids`: a sequence-to-sequence model's emitted token ids (a
translator's, a captioner's, an image-to-text model's greedy or beam output),
decoded into text by the tokenizer file the manifest names (a Hugging Face `tokenizers` JSON
file, read and applied by that library: its decoder joins word pieces, bytes and spaces as the
model's own tokenizer does).

The output is (N, L): each input's L ids, integers. Parameters:

- `tokenizer_path` (required): a repo:// or https:// tokenizer file; an https:// file needs
  `tokenizer_sha256`;
- `skip_special_tokens` (default true): whether the tokenizer's special tokens (`<pad>`, `</s>`,
  `[CLS]`, …) are left out of the text, as `Tokenizer.decode` leaves them;
- `end_id`: the id that ends a sequence (`</s>`, `<|endoftext|>`): where given, each input's ids
  after its first `end_id` are not read (a generator pads or keeps emitting past its end), and
  the end itself is left out of the text.

Every id read must be one of the tokenizer's (0 to its largest, added tokens included): another
is refused, naming the input and the id, since no text can be said for it. Emitted ids carry no
probability: a decoded text has no confidence (the result's rows hold its text alone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from predictors.processing.parameters import ProcessingError
from predictors.processing.text import load_tokenizer, tokenizer_call

__all__ = ["PARAMETERS", "TokenIdsDecoder"]

PARAMETERS = ("tokenizer_path", "tokenizer_sha256", "skip_special_tokens", "end_id")


@dataclass(frozen=True)
class TokenIdsDecoder:
    """A token_ids output's reading (see the module docstring): the tokenizer, its largest id,
    whether special tokens are skipped, and the end id."""

    tokenizer: Any
    largest: int
    skip_special_tokens: bool = True
    end_id: int | None = None
    decoding = "tokenizer"

    @classmethod
    def of(
        cls, parameters: Mapping[str, Any], fetch: Callable[[str, str | None], Path]
    ) -> TokenIdsDecoder:
        """The decoder a token_ids output's parameters describe, its tokenizer file fetched
        (`fetch(url, sha256)`) and read; ProcessingError naming the parameter at fault."""
        unknown = sorted(set(parameters) - set(PARAMETERS))
        if unknown:
            raise ProcessingError(
                f"unknown token_ids parameter {unknown[0]!r} (known: {', '.join(PARAMETERS)})",
                parameter=unknown[0],
            )
        path = parameters.get("tokenizer_path")
        if not isinstance(path, str):
            raise ProcessingError(
                "a token_ids output needs tokenizer_path, the tokenizer file that decodes its ids",
                parameter="tokenizer_path",
            )
        skip = parameters.get("skip_special_tokens", True)
        if not isinstance(skip, bool):
            raise ProcessingError(
                f"skip_special_tokens must be true or false; got {skip!r}",
                parameter="skip_special_tokens",
            )
        end = parameters.get("end_id")
        if end is not None and (isinstance(end, bool) or not isinstance(end, int) or end < 0):
            raise ProcessingError(
                f"end_id must be a token id (an integer from 0); got {end!r}", parameter="end_id"
            )
        sha256 = parameters.get("tokenizer_sha256")
        tokenizer = load_tokenizer(Path(fetch(path, sha256 if isinstance(sha256, str) else None)))
        vocabulary = tokenizer_call(
            lambda: tokenizer.get_vocab(with_added_tokens=True), "the tokenizer failed"
        )
        largest = max(vocabulary.values(), default=-1)
        if largest < 0:
            raise ProcessingError("the tokenizer file has no token", parameter="tokenizer_path")
        if end is not None and end > largest:
            raise ProcessingError(
                f"end_id is {end}, beyond the tokenizer's ids (0 to {largest})", parameter="end_id"
            )
        return cls(tokenizer, int(largest), skip, end)

    def describe(self) -> str:
        """The decoding in words."""
        return "tokenizer"

    def ids(self, outputs: Any, first: int = 0) -> list[list[int]]:
        """Each input's ids as read: up to (not including) its first end_id; the batch's shape,
        type and ids checked (an input named by its index, the batch's first being `first`)."""
        ids = np.asarray(outputs)
        if ids.ndim != 2:
            raise ProcessingError(
                f"a token_ids output is (N, L): each input's L token ids; got shape {ids.shape}",
                parameter="type",
            )
        if not np.issubdtype(ids.dtype, np.integer):
            raise ProcessingError(
                f"a token_ids output holds integer ids; got {ids.dtype} (scores per token are "
                "no ids: emit the ids the model chose, e.g. its argmax)",
                parameter="type",
            )
        rows: list[list[int]] = []
        for index, row in enumerate(ids.astype(np.int64)):
            if self.end_id is not None:
                ends = np.flatnonzero(row == self.end_id)
                if ends.size:
                    row = row[: ends[0]]
            wrong = row[(row < 0) | (row > self.largest)]
            if wrong.size:
                hint = (
                    "" if self.end_id is not None else " (give end_id where it pads past its end)"
                )
                raise ProcessingError(
                    f"input {first + index} emits id {int(wrong[0])}, which is not one of "
                    f"the tokenizer's ids (0 to {self.largest}){hint}",
                    parameter="tokenizer_path",
                )
            rows.append(row.tolist())
        return rows

    def decode(self, outputs: Any) -> list[str]:
        """Each input's text, of a batch of the output as the model gives it."""
        return self.texts(self.ids(outputs))

    def texts(self, rows: list[list[int]]) -> list[str]:
        """The texts of rows of ids as `ids` reads them."""
        return list(
            tokenizer_call(
                lambda: self.tokenizer.decode_batch(
                    rows, skip_special_tokens=self.skip_special_tokens
                ),
                "the tokenizer cannot decode the ids",
            )
        )
