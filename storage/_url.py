"""Storage by URL: ``file:///path`` (a data directory's objects) or ``s3://bucket/prefix``.
docs/design/storage.md, "Object storage"."""

from __future__ import annotations

import urllib.parse
import urllib.request
from pathlib import Path

from storage._bucket import BucketStorage
from storage._local import LocalStorage
from storage.base import ObjectStore

__all__ = ["SCHEMES", "open_storage", "storage_url_problem"]

SCHEMES = ("file", "s3")


def storage_url_problem(url: str) -> str | None:
    """Why ``url`` names no storage this package can open, or None if it does."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in SCHEMES:
        return f"storage URL must start with file:// or s3://, got {url!r}"
    if parsed.scheme == "file" and (parsed.netloc not in ("", "localhost") or not parsed.path):
        return f"a file:// storage URL needs an absolute path (file:///data/objects), got {url!r}"
    if parsed.scheme == "s3" and not parsed.netloc:
        return f"an s3:// storage URL needs a bucket (s3://bucket/prefix), got {url!r}"
    return None


def open_storage(url: str) -> ObjectStore:
    """The storage ``url`` names; ``ValueError`` (with the reason) for any other URL.

    For ``s3://`` the credentials and endpoint come from the standard AWS variables."""
    problem = storage_url_problem(url)
    if problem is not None:
        raise ValueError(problem)
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        return LocalStorage.at(Path(urllib.request.url2pathname(parsed.path)))
    return BucketStorage(url)
