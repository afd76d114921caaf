"""What can stop an evaluation, and which errors are meant for the user."""

from __future__ import annotations

from predictors.data import AssetError, DatasetError
from predictors.frameworks.predictor import (
    PredictorError,
)
from predictors.manifests import ManifestError
from predictors.processing import (
    ProcessingError,
)
from predictors.processing.custom_code import CustomCodeError


class EvaluationError(ValueError):
    """An evaluation cannot run as asked (a split that does not exist, a task the loop does not
    handle, a framework version outside the manifest's range, …)."""


class EvaluationCancelled(Exception):
    """`cancelled()` became true; the evaluation stopped between two predictions."""


# Every error whose message is meant for the user (a bad manifest, a missing file, a model that
# does not fit its input); anything else is a bug.
USER_ERRORS: tuple[type[Exception], ...] = (
    EvaluationError,
    PredictorError,
    ProcessingError,
    AssetError,
    DatasetError,
    ManifestError,
    CustomCodeError,
)
