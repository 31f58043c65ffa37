"""The loading half of :class:`~.client.CacheClient`: ``get`` (in place where this process
sees the server's storage, else over HTTP), ``locate``, and the trust checks a load passes
before anything is decoded (docs/protocol.md, "Signed results")."""

from __future__ import annotations

import dataclasses
import hmac
import http.client
import json
import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from ..core.errors import (
    CacheEntryCorrupt,
    CacheEntryUnavailable,
    CacheEntryUntrusted,
    CacheProtocolError,
    ResultCacheError,
)
from ..core.notices import warn_once
from ..core.signing import SigningKey
from ..wire import codec, headers
from . import direct, signatures
from .downloads import Downloads, ReadInto, read_body
from .pool import Busy, Pool, ServerFailed, while_busy
from .signatures import UNTRUSTED
from .status import busy_wait, check_status, detail, expect, server_error

__all__ = ["Loads", "run_header"]

logger = logging.getLogger("client_lib")

_NOT_DIRECT: Any = object()  # "read it over HTTP"


class Loads:
    """Loads for a client with a ``pool``, a ``signing_key`` and ``_downloads``."""

    url: str
    token: str | None
    signing_key: SigningKey | None
    pool: Pool
    _downloads: Downloads
    # Set once a location proves this process cannot see the server's storage.
    _storage_unseen: bool = False

    def get(self, task_hash: str, run: str | None = None) -> Any:
        """Load and verify the value stored under ``task_hash``: read where it lies when
        this process sees the server's storage (config ``result-cache.direct-read``,
        :mod:`.direct`), else, or if that fails, over HTTP.

        Raises :class:`CacheEntryUnavailable` if the entry is gone, and its subclasses
        :class:`CacheEntryCorrupt` if the bytes do not match their digest and
        :class:`CacheEntryUntrusted` if this client has a signing key and the entry no valid
        signature (checked on the headers: the body is not even downloaded; the server is
        told). Nothing is decoded, let alone unpickled, before both checks pass.
        ``run``: the id of the run that loads it (the server's ``hit`` event names it).
        """
        if not self._storage_unseen and direct.allowed():
            value = self._get_direct(task_hash, run)
            if value is not _NOT_DIRECT:
                return value
        path = f"/v1/objects/{task_hash}"

        def at(base: str) -> Any:
            def once(last: bool) -> Any:
                with self._downloads.open(self.pool, base, path, run_header(run)) as (
                        response, readinto):
                    wait = None if last else busy_wait(response)
                    if wait is not None:
                        return Busy(wait)
                    if server_error(response.status_code):
                        raise ServerFailed(f"{response.status_code} {detail(response)}")
                    return self._take_object(task_hash, response, readinto)

            try:
                return while_busy(once)
            except CacheEntryUntrusted:
                self.report_untrusted(task_hash)
                raise
            except (httpx.HTTPError, http.client.HTTPException, OSError) as exc:
                raise ServerFailed(str(exc)) from exc
            except KeyError as exc:
                raise CacheProtocolError(f"GET {path}: missing header {exc}") from None

        return self.pool.failover(f"GET {path}", at)

    def _take_object(self, task_hash: str, response: httpx.Response,
                     readinto: ReadInto) -> Any:
        """The value of a ``GET`` response: status, signature, body and digest checked."""
        if response.status_code == 404:
            raise CacheEntryUnavailable(task_hash, "not found")
        check_status(response, bool(self.token))
        expect(response, 200)
        h = response.headers
        kind, digest = h[headers.KIND], h[headers.DIGEST]
        dtype, shape = h.get(headers.DTYPE, ""), h.get(headers.SHAPE, "")
        signed = signatures.signed_body(self.signing_key, task_hash, h)
        if signed is None:
            raise CacheEntryUntrusted(task_hash, UNTRUSTED)
        data, actual, root = read_body(readinto, h.get("content-length"), kind, dtype, shape,
                                       strong=bool(signed))
        if actual != digest:
            # Large bodies come unread by the server: it verifies the object when told.
            self.report_corrupt(task_hash)
            raise CacheEntryCorrupt(task_hash, digest, actual)
        if root is None:
            signatures.check_body(task_hash, signed, kind, dtype, shape, data)
        elif not hmac.compare_digest(root, signed):
            raise CacheEntryUntrusted(task_hash, signatures.NOT_THE_SIGNED_BODY)
        return codec.decode(kind, dtype, shape, data)

    def locate(self, task_hash: str, run: str | None = None) -> direct.Location | None:
        """Where the entry's object lies and what it is (``GET /v1/entries/{hash}/location``,
        which counts a hit), or ``None`` when the server has no such entry. Raises
        :class:`CacheEntryUntrusted` (reported to the server) when this client has a
        signing key and the entry no valid signature: checked before anything is read."""
        response = self.pool.request("GET", f"/v1/entries/{task_hash}/location",
                                     headers=run_header(run))
        if response.status_code == 404:
            return None
        expect(response, 200)
        try:
            found = response.json()
            shape = found.get("shape")
            place = direct.Location(
                path=direct.local_path(found.get("location")), storage=found["storage"],
                kind=found["kind"], dtype=found.get("dtype") or "",
                shape="" if shape is None else json.dumps(shape, separators=(",", ":")),
                digest=found["digest"], label=found.get("label") or "")
            signature = found.get("signature")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CacheProtocolError(f"bad location of {task_hash}: {exc!r}") from None
        key = self.signing_key
        if key is not None:
            signed = key.verify(signature, task_hash, place.kind, place.dtype, place.shape,
                                place.digest)
            if signed is None:
                self.report_untrusted(task_hash)
                raise CacheEntryUntrusted(task_hash, UNTRUSTED)
            place = dataclasses.replace(place, body=signed)
        return place

    def _get_direct(self, task_hash: str, run: str | None = None) -> Any:
        """The value read in place and verified, or ``_NOT_DIRECT`` (load over HTTP).
        The signature is checked on the entry's metadata before the object is read; a
        mismatch is :class:`CacheEntryUntrusted`, as over HTTP."""
        try:
            place = self.locate(task_hash, run)
        except CacheEntryUntrusted:
            raise
        except ResultCacheError:
            return _NOT_DIRECT  # the HTTP load reports whatever is wrong
        if place is None:
            return _NOT_DIRECT
        if place.path is None:
            self._storage_unseen = True
            return _NOT_DIRECT
        keyed = self.signing_key is not None
        try:
            body, root = direct.read_object(place.path, place.storage, place.kind,
                                            place.dtype, place.shape, place.digest,
                                            strong=keyed)
        except direct.DirectReadFailed as exc:
            logger.info("result cache: direct read of %s failed (%s); loading over HTTP",
                        task_hash, exc)
            return _NOT_DIRECT
        if keyed:
            try:
                if root is None:
                    signatures.check_body(task_hash, place.body, place.kind, place.dtype,
                                          place.shape, body)
                elif not hmac.compare_digest(root, place.body):
                    raise CacheEntryUntrusted(task_hash, signatures.NOT_THE_SIGNED_BODY)
            except CacheEntryUntrusted:
                self.report_untrusted(task_hash)
                raise
        return codec.decode(place.kind, place.dtype, place.shape, body)

    # -- untrusted entries --------------------------------------------------------------

    def untrusted_among(self, hashes: Iterable[str]) -> set[str]:
        """Which of ``hashes`` lack a valid signature, from their headers (``HEAD``, no
        body, no hit counted); each one found is reported to the server. Empty without a
        key. For when one untrusted entry suggests that others were replaced too."""
        hashes = list(hashes)
        if self.signing_key is None or not hashes:
            return set()

        def untrusted(task_hash: str) -> bool:
            try:
                response = self.pool.request("HEAD", f"/v1/objects/{task_hash}")
            except ResultCacheError:
                return False  # unknown: its own load will tell
            return (response.status_code == 200 and signatures.signed_body(
                self.signing_key, task_hash, response.headers) is None)

        with ThreadPoolExecutor(max_workers=min(8, len(hashes))) as pool:
            found = {h for h, bad in zip(hashes, pool.map(untrusted, hashes), strict=True)
                     if bad}
        for task_hash in found:
            self.report_untrusted(task_hash)
        return found

    def report_corrupt(self, task_hash: str) -> None:
        """Tell the server that this entry's body did not match its digest, so that it
        verifies the object and drops the entry if the stored bytes are bad (docs/protocol.md,
        ``POST /v1/entries/{hash}/corrupt``). Best effort: never raises."""
        try:
            self.pool.request("POST", f"/v1/entries/{task_hash}/corrupt")
        except ResultCacheError as exc:
            logger.info("result cache: could not report a corrupt entry to %s: %s",
                        self.url, exc)

    def report_untrusted(self, task_hash: str) -> None:
        """Tell the server that this entry was not loaded for its signature (counted as
        ``untrusted`` in its stats). Best effort: never raises."""
        try:
            self.pool.request("POST", f"/v1/entries/{task_hash}/untrusted")
        except ResultCacheError as exc:
            warn_once(f"result cache: could not report an untrusted entry to {self.url}: "
                      f"{exc}", key=f"report untrusted: {self.url}")




def run_header(run: str | None) -> dict[str, str] | None:
    """``X-Result-Run``: the run a load or store belongs to (its event names it)."""
    return {headers.RUN: run} if run is not None else None
