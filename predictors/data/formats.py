"""The encodings a dataset manifest may state, told apart by their first bytes."""

from __future__ import annotations

# Magic bytes of each encoding.
MAGIC = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "jpeg": (b"\xff\xd8\xff",),
    "npy": (b"\x93NUMPY",),
    "flac": (b"fLaC",),
    "wav": (b"RIFF",),
}


def image_encoding(data: bytes) -> str | None:
    """`png` or `jpeg`, as the bytes of an image file start; None for anything else."""
    for encoding in ("png", "jpeg"):
        if data.startswith(MAGIC[encoding]):
            return encoding
    return None
