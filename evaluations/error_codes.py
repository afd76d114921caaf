"""The codes of the evaluations' domain errors (an error body's `code`). Those an agent acts on
are the protocol's (`predictors.protocol.Code`); those the hub's own refusals share
(`unsatisfiable`, `not_owner`) are `hub.error_codes`."""

from __future__ import annotations

from enum import StrEnum

from predictors.protocol import Code


class EvaluationErrorCode(StrEnum):
    NOT_FOUND = Code.NOT_FOUND
    HOST_NOT_TRUSTED = Code.HOST_NOT_TRUSTED
    HOST_NOT_YOURS = Code.HOST_NOT_YOURS
    CLAIM_TAKEN = Code.CLAIM_TAKEN
    CLAIM_SUPERSEDED = Code.CLAIM_SUPERSEDED
    UNSUPPORTED = "unsupported"  # a model the evaluation loop cannot run as its manifest says
    LABEL_MISMATCH = "label_mismatch"  # a trained model's labels are not the dataset's
    TRACE_TAKEN = "trace_taken"  # the traceparent's trace is another user's
    RESULT_MISMATCH = "result_mismatch"  # a result that does not answer the request
    FINISHED = "finished"  # the evaluation is finished already
    INVALID_OVERRIDE = "invalid_override"  # an override that leaves the manifest invalid
    NOT_PUBLISHABLE = "not_publishable"  # not succeeded, or of a private model or dataset
    NOT_SHAREABLE = "not_shareable"  # its model or dataset is hidden from the group
