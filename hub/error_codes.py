"""The codes of the hub's domain errors (an error body's `code`). An error without one has its
kind's (`hub.errors`: `invalid`, `not_found`, `forbidden`, `conflict`, `too_large`)."""

from __future__ import annotations

from enum import StrEnum


class HubErrorCode(StrEnum):
    NAME_TAKEN = "name_taken"  # a manifest or host name belongs to another user
    VERSION_EXISTS = "version_exists"  # publish a new version instead
    FILE_CONFLICT = "file_conflict"  # a store path holds other content, or another's file
    FILE_MISSING = "file_missing"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    GRAPH_MISMATCH = "graph_mismatch"  # declared inputs/outputs that are not the graph's
    DATASET_INVALID = "dataset_invalid"  # a split file that is not what its manifest says
    NOT_STAFF = "not_staff"
    NOT_A_MEMBER = "not_a_member"
    UNSATISFIABLE = "unsatisfiable"  # no manifest and live host meet the constraints
    NOT_OWNER = "not_owner"  # only the object's owner may do this
    NOT_GROUP_OWNER = "not_group_owner"  # only the group's owner may do this
    ALREADY_MEMBER = "already_member"  # an invitation to someone who belongs to the group
