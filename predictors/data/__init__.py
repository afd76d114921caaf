"""The data manager: model and dataset files fetched into a checksum-keyed local cache
(`cache`), Parquet splits read a batch at a time (`readers`, `streams`) and checked against
their manifests (`validation`), and datasets made from a folder of images (`folder`) or from
COCO's files (`coco`)."""

from predictors.data.cache import AssetError, DataManager, ProgressCallback, default_cache_dir
from predictors.data.readers import (
    TARGETS,
    DatasetError,
    DatasetReader,
    DetectionReader,
    MaskReader,
    target_of,
)
from predictors.data.streams import ClipReader, ClipStreams, StreamReader, lockstep_calls
from predictors.data.validation import split_problems

__all__ = [
    "TARGETS",
    "AssetError",
    "ClipReader",
    "ClipStreams",
    "DataManager",
    "DatasetError",
    "DatasetReader",
    "DetectionReader",
    "MaskReader",
    "ProgressCallback",
    "StreamReader",
    "default_cache_dir",
    "lockstep_calls",
    "split_problems",
    "target_of",
]
