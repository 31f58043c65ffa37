"""The names of the object headers (docs/protocol.md, ``PUT /v1/objects/{hash}``), defined
once for both sides. HTTP header names are case-insensitive: a response's headers are
looked up by these names as they are."""

from __future__ import annotations

__all__ = ["COMPUTE_SECONDS", "DIGEST", "DTYPE", "EXPIRES", "KIND", "LABEL", "RUN", "SHAPE",
           "SIGNATURE", "STAGING", "TTL", "TYPE"]

KIND = "X-Result-Kind"  # ndarray | pickle | parquet
DIGEST = "X-Result-Digest"  # the content digest (32 hex)
DTYPE = "X-Result-Dtype"  # arrays: the dtype string
SHAPE = "X-Result-Shape"  # arrays: the shape as JSON
COMPUTE_SECONDS = "X-Result-Compute-Seconds"  # the task's own time
LABEL = "X-Result-Label"  # percent-encoded UTF-8
TYPE = "X-Result-Type"  # the value's type, module.qualname
SIGNATURE = "X-Result-Signature"  # docs/protocol.md, "Signed results"
TTL = "X-Result-TTL"  # seconds the entry lives
EXPIRES = "X-Result-Expires"  # when it expires (answers only)
RUN = "X-Result-Run"  # the run a load or store belongs to (its event names it)
STAGING = "X-Result-Staging"  # a commit: the staging id whose files are the object
