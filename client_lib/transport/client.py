"""``CacheClient``: the HTTP side of docs/protocol.md, used by the user's process (lookup)
and by the workers (load, store).

One pooled ``httpx.Client`` per process and server list (``CacheClient.shared``); bodies
stream in ~1 MiB pieces both ways. The URL may list several replicas of one cache
(:mod:`.endpoints`): requests rotate over them, and one that cannot be reached or answers
5xx is retried on the next. Every method raises :class:`CacheUnavailable` when no
server answers, and :class:`CacheAccessDenied` when one refuses the token (401/403), so
callers decide how to degrade.
"""

from __future__ import annotations

import dataclasses
import http.client
import itertools
import json
import logging
import os
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import dask.config
import httpx
import numpy as np
from dask.sizeof import sizeof

from ..core.errors import (
    CacheAccessDenied,
    CacheEntryCorrupt,
    CacheEntryUnavailable,
    CacheEntryUntrusted,
    CacheProtocolError,
    CacheUnavailable,
    ResultCacheError,
    access_hint,
)
from ..core.notices import warn_once
from ..core.signing import SigningKey, configured_key
from ..policy.speeds import LOAD_SPEEDS, STORE_SPEEDS
from ..wire import codec
from ..wire.body_hash import body_root
from . import direct, light
from .endpoints import Endpoints, normalize_urls

__all__ = ["CacheClient", "direct_read_mode"]

logger = logging.getLogger("client_lib")

_TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=300.0, pool=60.0)
_LOOKUP_BATCH = 200_000
#: A server answering 503 with Retry-After is asked again this often, waiting at most this
#: long each time, before it counts as unavailable.
_BUSY_RETRIES = 5
_MAX_BUSY_WAIT = 5.0
#: The protocol's bound on ``X-Result-Compute-Seconds`` (about 116 days).
MAX_COMPUTE_SECONDS = 1e7
_FROM_CONFIG: Any = object()  # "this process's result-cache.signing-key"
_UNTRUSTED = "no valid signature for result-cache.signing-key; not loaded"
_LEASE_BATCH = 100_000  # the server's default max_lease_hashes
_NOT_DIRECT: Any = object()  # "read it over HTTP"
#: Bytes asked of the socket per ``readinto`` of a download (then hashed while in cache).
_READ_BYTES = 1 << 20


class CacheClient:
    """A client of one cache server. Thread safe; cheap to pickle (only URL and token
    travel, the connection pool is rebuilt in each process).

    ``from_config=True`` marks a client whose URL came from ``dask.config`` rather than an
    explicit argument. Unpickled in another process (a Dask worker), such a client follows
    *that* process's ``result-cache.url`` when it has one (with that process's
    ``result-cache.token``; the sender's token never goes to another address): the
    user's process may know the server by an address the workers cannot reach
    (``http://localhost:8780`` on a Docker host, ``http://cache-server:8780`` inside the
    stack). Hashes name computations, not servers, so a worker that reaches a different
    server than the client still returns correct values: its loads miss and are recomputed.
    An explicit URL travels unchanged.

    ``url`` may list several servers of one cache, comma-separated (replicas behind one
    Redis and one storage): every request goes to the next in turn, and on a connection
    failure or a 5xx to the following ones, before :class:`CacheUnavailable`.

    ``signing_key`` (default: this process's ``result-cache.signing-key``; a secret string
    or a :class:`~client_lib.core.signing.SigningKey`) signs every store and is checked on every
    load before anything is unpickled (docs/protocol.md, "Signed results"). It travels with
    the client to the workers, never to the server; a worker uses its own configured key
    only when the sender has none.
    """

    _shared: dict[tuple[str, str | None, bool, int, SigningKey | None], CacheClient] = {}
    _shared_lock = threading.Lock()

    def __init__(self, url: str, token: str | None = None, *, from_config: bool = False,
                 signing_key: SigningKey | str | None = _FROM_CONFIG) -> None:
        self.url = normalize_urls(url)
        self.endpoints = Endpoints(self.url)
        self.token = token
        self.from_config = from_config
        self.signing_key = _signing_key(signing_key)
        self._http: httpx.Client | None = None
        self._lock = threading.Lock()
        # Set once the server refuses a store: later stores skip the upload.
        self._store_refused: CacheAccessDenied | None = None
        # Set once a location proves this process cannot see the server's storage.
        self._storage_unseen = False
        # Each thread's kept-alive download connection per server (see _download).
        self._downloads = threading.local()
        # Requests left to send over the standard library before the pool (light.py).
        self._light_left = light.FIRST_REQUESTS

    @classmethod
    def shared(cls, url: str, token: str | None = None, *, from_config: bool = False,
               signing_key: SigningKey | str | None = _FROM_CONFIG) -> CacheClient:
        """The process-wide client for ``url`` and key (a fork gets its own pool)."""
        signing_key = _signing_key(signing_key)
        key = (normalize_urls(url), token, from_config, os.getpid(), signing_key)
        client = cls._shared.get(key)
        if client is None:
            with cls._shared_lock:
                client = cls._shared.setdefault(key, cls(
                    url, token, from_config=from_config, signing_key=signing_key))
        return client

    def __reduce__(self):
        if self.from_config:
            return (_configured_client, (self.url, self.token, self.signing_key))
        return (_explicit_client, (self.url, self.token, self.signing_key))

    def __repr__(self) -> str:
        return f"CacheClient({self.url!r})"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            with self._lock:
                if self._http is None:
                    headers = self._headers()
                    # Plain HTTP needs no TLS context (building one costs ~40 ms).
                    verify = any(u.startswith("https://") for u in self.endpoints.urls)
                    self._http = httpx.Client(timeout=_TIMEOUT,
                                              headers=headers, verify=verify,
                                              limits=httpx.Limits(max_connections=64))
        return self._http

    def warm(self) -> None:
        """Build the connection pool and open a connection (``GET /healthz``, no token, no
        hit counted): a process's first load then pays neither for httpx's transport
        imports (httpcore, h11: built with the first ``httpx.Client``) nor for connecting.
        Raises like any request (:class:`CacheUnavailable`). docs/architecture.md,
        Warming the workers."""
        self._light_left = 0  # the pool, not the first-request path (light.py)
        _expect(self._request("GET", "/healthz"), 200)

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None
        for conn in getattr(self._downloads, "conns", {}).values():
            conn.close()
        self._downloads = threading.local()

    def _request(self, method: str, path: str, *,
                 body: Callable[[], Iterable[Any]] | None = None,
                 **kwargs: Any) -> httpx.Response:
        """One request, to each server in turn until one answers other than 5xx.
        ``body`` makes a fresh request body for each attempt (a stream is read once)."""
        failures: list[str] = []
        for base in self.endpoints.order():
            if body is not None:
                kwargs["content"] = body()
            try:
                response = self._send(method, base + path, kwargs)
                for _ in range(_BUSY_RETRIES):  # busy, not lost: ask again when told to
                    if (wait := _busy_wait(response)) is None:
                        break
                    response.close()
                    time.sleep(wait)
                    if body is not None:
                        kwargs["content"] = body()
                    response = self._send(method, base + path, kwargs)
            except httpx.HTTPError as exc:
                failures.append(f"{base}: {exc}")
                self.endpoints.failed(base)
                continue
            if _server_error(response.status_code):
                failures.append(f"{base}: {response.status_code} {_detail(response)}")
                self.endpoints.failed(base)
                continue
            self.endpoints.answered(base)
            self._check_status(response)
            return response
        raise CacheUnavailable(f"{method} {path} failed: {'; '.join(failures)}")

    def _send(self, method: str, url: str, kwargs: dict[str, Any]) -> httpx.Response:
        """A process's first few requests go over the standard library, until the pool
        exists (:mod:`.light`: building it imports httpx's transport); then the pool."""
        if self._http is None and self._light_left > 0:
            response = light.request(method, url, self._headers(), **kwargs)
            if response is not None:
                self._light_left -= 1  # racy across threads: a request more or less
                return response
        return self.http.request(method, url, **kwargs)

    def _check_status(self, response: httpx.Response) -> None:
        """The one mapping of statuses every request shares: a server error (5xx, but 507:
        no room) is :class:`CacheUnavailable`, a refused token (401/403)
        :class:`CacheAccessDenied` with a hint. Other statuses are the caller's."""
        status = response.status_code
        what = f"{response.request.method} {response.request.url.copy_with(query=None)}"
        if _server_error(status):
            raise CacheUnavailable(f"{what}: {status} {_detail(response)}")
        if status not in (401, 403):
            return
        hint = access_hint(status, bool(self.token),
                           "set result-cache.token (DASK_RESULT_CACHE__TOKEN)")
        raise CacheAccessDenied(status, f"{what}: {status} {_detail(response)}; {hint}", hint)

    # -- index --------------------------------------------------------------------------

    def lookup(self, hashes: Iterable[str]) -> set[str]:
        """Which of ``hashes`` (32-hex task hashes) the server holds: one request per
        200k distinct hashes, through the packed route (no JSON either way)."""
        hashes = list(hashes if isinstance(hashes, set | frozenset) else dict.fromkeys(hashes))
        found: set[str] = set()
        for start in range(0, len(hashes), _LOOKUP_BATCH):
            batch = hashes[start:start + _LOOKUP_BATCH]
            response = self._request(
                "POST", "/v1/lookup/packed", content="".join(batch).encode("ascii"),
                headers={"Content-Type": "application/octet-stream"})
            _expect(response, 200)
            flags = response.content
            if len(flags) != len(batch):
                raise CacheProtocolError(f"lookup answered {len(flags)} flags for "
                                         f"{len(batch)} hashes")
            found.update(itertools.compress(batch, flags))
        return found

    def post_run(self, summary: dict[str, Any]) -> None:
        """Record a run summary (docs/protocol.md, "Runs")."""
        _expect(self._request("POST", "/v1/runs", json=summary), 200)

    def stats(self) -> dict[str, Any]:
        response = self._request("GET", "/v1/stats")
        _expect(response, 200)
        return response.json()

    def entry(self, task_hash: str) -> dict[str, Any] | None:
        """The entry's manifest as the server describes it, or ``None``."""
        response = self._request("GET", f"/v1/entries/{task_hash}")
        if response.status_code == 404:
            return None
        _expect(response, 200)
        return response.json()

    def delete(self, task_hash: str) -> bool:
        response = self._request("DELETE", f"/v1/entries/{task_hash}")
        if response.status_code == 404:
            return False
        _expect(response, 204)
        return True

    # -- leases (docs/protocol.md, "Leases") --------------------------------------------

    def acquire_leases(self, hashes: Iterable[str], holder: str,
                       ttl: float) -> tuple[set[str], set[str], set[str]]:
        """Lease ``hashes`` for ``holder`` for ``ttl`` seconds: the hashes now leased to
        ``holder`` (new, or already its own), those stored meanwhile, those another holder
        leases."""
        granted: set[str] = set()
        stored: set[str] = set()
        held: set[str] = set()
        for batch in _batches(hashes, _LEASE_BATCH):
            body = self._lease_call("/v1/leases", {"holder": holder, "ttl": ttl,
                                                   "hashes": batch})
            granted.update(body["granted"])
            stored.update(body["stored"])
            held.update(body["held"])
        return granted, stored, held

    def renew_leases(self, estimates: dict[str, float | None], holder: str,
                     ttl: float) -> set[str]:
        """Extend ``holder``'s leases of these hashes by ``ttl`` seconds (re-taking any
        that expired and nobody took); each maps to how long its task is expected to
        take, where known. Returns the hashes still leased to ``holder``."""
        renewed: set[str] = set()
        for batch in _batches(estimates, _LEASE_BATCH):
            known = {h: estimates[h] for h in batch if estimates[h] is not None}
            body = self._lease_call("/v1/leases/renew", {
                "holder": holder, "ttl": ttl, "hashes": batch, "estimates": known})
            renewed.update(body["renewed"])
        return renewed

    def release_leases(self, hashes: Iterable[str], holder: str) -> int:
        """Drop ``holder``'s leases of ``hashes`` (others' leases are untouched)."""
        released = 0
        for batch in _batches(hashes, _LEASE_BATCH):
            body = self._lease_call("/v1/leases/release", {"holder": holder,
                                                           "hashes": batch})
            released += int(body["released"])
        return released

    def lease_status(self, task_hash: str) -> dict[str, Any]:
        """``{"leased", "stored", "ttl", "estimate"}`` for one hash."""
        response = self._request("GET", f"/v1/leases/{task_hash}")
        _expect(response, 200)
        return response.json()

    def _lease_call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self._request("POST", path, json=body)
        _expect(response, 200)
        return response.json()

    # -- objects ------------------------------------------------------------------------

    def put(self, task_hash: str, value: Any, compute_seconds: float, label: str, *,
            ttl: float | None = None, overwrite: bool = False, run: str | None = None
            ) -> bool:
        """Store ``value`` under ``task_hash``; ``True`` if the server now holds it, ``False``
        if it has no room (413/507). Raises :class:`CacheAccessDenied` without uploading once
        the server has refused a store from this client.

        ``ttl``: seconds after which the entry expires. ``overwrite``: replace an entry
        that exists (without it, storing an indexed hash changes nothing). ``run``: the
        id of the run that stores it (its ``store`` event names it)."""
        if self._store_refused is not None:
            raise self._store_refused
        enc = value if isinstance(value, codec.Encoded) else codec.encode(value)
        seconds = min(max(float(compute_seconds), 0.0), MAX_COMPUTE_SECONDS)
        headers = {
            "X-Result-Kind": enc.kind,
            "X-Result-Digest": enc.digest,
            "X-Result-Compute-Seconds": repr(seconds),
            "X-Result-Label": urllib.parse.quote(label, safe=""),
            "X-Result-Type": enc.type_name,
            "Content-Length": str(enc.nbytes),
        }
        if enc.kind == "ndarray":
            headers["X-Result-Dtype"] = enc.dtype
            headers["X-Result-Shape"] = enc.shape
        if self.signing_key is not None:
            headers["X-Result-Signature"] = self._sign(task_hash, enc)
        if ttl is not None:
            headers["X-Result-TTL"] = repr(float(ttl))
        if run is not None:
            headers["X-Result-Run"] = run
        # memoryview slices of the value itself: h11 copies each once into the request
        # bytes anyway, so converting them to ``bytes`` first would copy everything twice.
        start = time.perf_counter()
        try:
            response = self._request("PUT", f"/v1/objects/{task_hash}", body=enc.chunks,
                                     headers=headers,
                                     params={"overwrite": "true"} if overwrite else None)
        except CacheAccessDenied as exc:
            self._store_refused = exc
            raise
        if response.status_code in (200, 201):
            STORE_SPEEDS.record(enc.nbytes, time.perf_counter() - start)
            return True
        if response.status_code in (413, 507):  # too large / no space: not an error
            return False
        raise CacheProtocolError(f"PUT {task_hash}: {response.status_code} "
                                 f"{_detail(response)}")

    def put_many(self, items: list[tuple[str, codec.Encoded, float, str, float | None,
                                         str | None]]) -> list[bool]:
        """Store small encoded values (``(task_hash, encoded, compute_seconds, label,
        ttl, run id)``, bodies below 1 MiB) in one ``POST /v1/objects/batch``: the server makes
        them durable together (one group commit) before it answers. Per item, whether the
        server now holds it. Raises like :meth:`put` for the whole request."""
        if self._store_refused is not None:
            raise self._store_refused
        parts: list[bytes | memoryview] = []
        for task_hash, enc, seconds, label, ttl, run in items:
            meta: dict[str, Any] = {
                "hash": task_hash, "kind": enc.kind, "digest": enc.digest,
                "nbytes": enc.nbytes, "label": label, "type": enc.type_name,
                "compute_seconds": min(max(float(seconds), 0.0), MAX_COMPUTE_SECONDS)}
            if enc.kind == "ndarray":
                meta["dtype"], meta["shape"] = enc.dtype, enc.shape
            if self.signing_key is not None:
                meta["signature"] = self._sign(task_hash, enc)
            if ttl is not None:
                meta["ttl"] = float(ttl)
            if run is not None:
                meta["run"] = run
            header = json.dumps(meta, separators=(",", ":")).encode()
            parts += [len(header).to_bytes(4, "big"), header, enc.body]
        payload = b"".join(parts)
        start = time.perf_counter()
        try:
            response = self._request("POST", "/v1/objects/batch", body=lambda: payload,
                                     headers={"Content-Type": "application/x-result-batch"})
        except CacheAccessDenied as exc:
            self._store_refused = exc
            raise
        _expect(response, 200)
        STORE_SPEEDS.record(len(payload), time.perf_counter() - start)
        results = response.json()["results"]
        if len(results) != len(items):
            raise CacheProtocolError(f"batch of {len(items)} answered with {len(results)}")
        return [r["status"] in (200, 201) for r in results]

    def _sign(self, task_hash: str, enc: codec.Encoded) -> str:
        assert self.signing_key is not None
        return self.signing_key.sign(task_hash, enc.kind, enc.dtype, enc.shape, enc.digest,
                                     body_root(enc.kind, enc.dtype, enc.shape, enc.body))

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
        start = time.perf_counter()
        if not self._storage_unseen and _direct_allowed():
            value = self._get_direct(task_hash, run)
            if value is not _NOT_DIRECT:
                return _learned(value, start)
        failures: list[str] = []
        for base in self.endpoints.order():
            try:
                found = self._get_from(base, task_hash, run)
            except CacheUnavailable as exc:
                failures.append(str(exc))
                self.endpoints.failed(base)
                continue
            self.endpoints.answered(base)
            return _learned(found, start)
        raise CacheUnavailable("; ".join(failures))

    def _get_from(self, base: str, task_hash: str, run: str | None = None) -> Any:
        """:meth:`get` from one server; :class:`CacheUnavailable` if it fails (the next
        one may answer)."""
        path = f"/v1/objects/{task_hash}"
        for attempt in range(_BUSY_RETRIES + 1):
            try:
                with self._download(base, path, run) as (response, readinto):
                    wait = _busy_wait(response) if attempt < _BUSY_RETRIES else None
                    if wait is None:
                        return self._take_object(task_hash, response, readinto)
            except CacheEntryUntrusted:
                self.report_untrusted(task_hash)
                raise
            except (httpx.HTTPError, http.client.HTTPException, OSError) as exc:
                raise CacheUnavailable(f"GET {base}{path} failed: {exc}") from exc
            except KeyError as exc:
                raise CacheProtocolError(f"GET {path}: missing header {exc}") from None
            time.sleep(wait)  # busy (downloads in flight), not lost: ask again when told
        raise AssertionError("unreachable: the last attempt returns or raises")

    @contextmanager
    def _download(self, base: str, path: str, run: str | None = None
                  ) -> Iterator[tuple[httpx.Response, Callable[[memoryview], int]]]:
        """``GET base + path``: the response (status and headers; a body other than a
        200's already read) and a ``readinto`` that fills the caller's buffer from the
        body. Plain ``http://`` servers without a proxy are read through ``http.client``
        on a kept-alive connection per thread: its ``readinto`` takes the body from the
        socket straight into the value's buffer, where httpx reads 64 KiB at a time
        through h11 (four copies and ~16k Python steps per GiB: a 1 GiB load cost 2.7-3.4
        CPU-seconds in the client, BENCHMARKS.md, measure 5). Others go through httpx.
        ``run``: the loading run's id (``X-Result-Run``)."""
        if not light.plain_http(base):
            with self.http.stream("GET", base + path, headers=_run_header(run)) as response:
                yield response, _readinto_from(response.iter_raw())
            return
        conns: dict[str, http.client.HTTPConnection] = self._downloads.__dict__.setdefault(
            "conns", {})
        conn = conns.pop(base, None)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        headers.update(_run_header(run) or {})
        try:
            raw = _send_get(conn, base, path, headers) if conn else None
        except (http.client.HTTPException, OSError):
            conn.close()  # the server closed the kept-alive connection meanwhile
            raw = None
        if raw is None:
            conn = light.connect(base)
            raw = _send_get(conn, base, path, headers)
        assert conn is not None
        request = httpx.Request("GET", base + path)
        status = raw.status
        response = httpx.Response(status, headers=raw.getheaders(), request=request,
                                  content=None if status == 200 else raw.read())
        try:
            yield response, raw.readinto
        finally:
            if raw.isclosed() and not raw.will_close:  # the body was read to its end
                conns[base] = conn
            else:
                conn.close()

    def _take_object(self, task_hash: str, response: httpx.Response,
                     readinto: Callable[[memoryview], int]) -> Any:
        """The value of a ``GET`` response: status, signature, body and digest checked."""
        if response.status_code == 404:
            raise CacheEntryUnavailable(task_hash, "not found")
        self._check_status(response)
        _expect(response, 200)
        h = response.headers
        kind, digest = h["x-result-kind"], h["x-result-digest"]
        dtype, shape = h.get("x-result-dtype", ""), h.get("x-result-shape", "")
        signed = self._signed_body(task_hash, h)
        if signed is None:
            raise CacheEntryUntrusted(task_hash, _UNTRUSTED)
        data, actual = _read_body(readinto, h.get("content-length"), kind, dtype, shape)
        if actual != digest:
            raise CacheEntryCorrupt(task_hash, digest, actual)
        _check_body(task_hash, signed, kind, dtype, shape, data)
        return codec.decode(kind, dtype, shape, data)

    def locate(self, task_hash: str, run: str | None = None) -> direct.Location | None:
        """Where the entry's object lies and what it is (``GET /v1/entries/{hash}/location``,
        which counts a hit), or ``None`` when the server has no such entry. Raises
        :class:`CacheEntryUntrusted` (reported to the server) when this client has a
        signing key and the entry no valid signature: checked before anything is read."""
        response = self._request("GET", f"/v1/entries/{task_hash}/location",
                                 headers=_run_header(run))
        if response.status_code == 404:
            return None
        _expect(response, 200)
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
                raise CacheEntryUntrusted(task_hash, _UNTRUSTED)
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
        try:
            body = direct.read_object(place.path, place.storage, place.kind, place.dtype,
                                      place.shape, place.digest)
        except direct.DirectReadFailed as exc:
            logger.info("result cache: direct read of %s failed (%s); loading over HTTP",
                        task_hash, exc)
            return _NOT_DIRECT
        if self.signing_key is not None:
            try:
                _check_body(task_hash, place.body, place.kind, place.dtype, place.shape, body)
            except CacheEntryUntrusted:
                self.report_untrusted(task_hash)
                raise
        return codec.decode(place.kind, place.dtype, place.shape, body)

    def _signed_body(self, task_hash: str, headers: httpx.Headers) -> str | None:
        """The body digest our signature in an object's headers binds for ``task_hash``
        (``""`` for a client without a key, which checks nothing), or ``None``: no valid
        signature."""
        key = self.signing_key
        if key is None:
            return ""
        return key.verify(
            headers.get("x-result-signature"), task_hash, headers.get("x-result-kind", ""),
            headers.get("x-result-dtype", ""), headers.get("x-result-shape", ""),
            headers.get("x-result-digest", ""))

    def untrusted_among(self, hashes: Iterable[str]) -> set[str]:
        """Which of ``hashes`` lack a valid signature, from their headers (``HEAD``, no
        body, no hit counted); each one found is reported to the server. Empty without a
        key. For when one untrusted entry suggests that others were replaced too."""
        hashes = list(hashes)
        if self.signing_key is None or not hashes:
            return set()

        def untrusted(task_hash: str) -> bool:
            try:
                response = self._request("HEAD", f"/v1/objects/{task_hash}")
            except ResultCacheError:
                return False  # unknown: its own load will tell
            return (response.status_code == 200
                    and self._signed_body(task_hash, response.headers) is None)

        with ThreadPoolExecutor(max_workers=min(8, len(hashes))) as pool:
            found = {h for h, bad in zip(hashes, pool.map(untrusted, hashes), strict=True)
                     if bad}
        for task_hash in found:
            self.report_untrusted(task_hash)
        return found

    def report_untrusted(self, task_hash: str) -> None:
        """Tell the server that this entry was not loaded for its signature (counted as
        ``untrusted`` in its stats). Best effort: never raises."""
        try:
            self._request("POST", f"/v1/entries/{task_hash}/untrusted")
        except ResultCacheError as exc:
            warn_once(f"result cache: could not report an untrusted entry to {self.url}: "
                      f"{exc}", key=f"report untrusted: {self.url}")


def _check_body(task_hash: str, signed: str, kind: str, dtype: str, shape: str,
                body: Any) -> None:
    """Raise :class:`CacheEntryUntrusted` unless ``body`` has the body digest ``signed``
    binds (nothing to check for ``""``: a client without a key). Bytes that match the
    content digest but not this were written to pass for the signed ones."""
    if signed and body_root(kind, dtype, shape, body) != signed:
        raise CacheEntryUntrusted(task_hash, "the body is not the one its signature binds; "
                                  "not loaded")


def _run_header(run: str | None) -> dict[str, str] | None:
    """``X-Result-Run``: the run a load or store belongs to (its event names it)."""
    return {"X-Result-Run": run} if run is not None else None


def _server_error(status: int) -> bool:
    """A status that says the server failed, not the request (507: no room, is an answer)."""
    return status >= 500 and status != 507


def _learned(value: Any, start: float) -> Any:
    """Record how long loading ``value`` took (for the auto policy, client_lib/policy/speeds.py)."""
    LOAD_SPEEDS.record(codec.kind_of(value), sizeof(value), time.perf_counter() - start)
    return value


def direct_read_mode() -> str:
    """Config ``result-cache.direct-read``: ``"auto"`` (read objects in place when this
    process sees the server's storage) or ``"never"``."""
    mode = dask.config.get("result-cache.direct-read", "auto")
    if mode not in ("auto", "never"):
        raise ValueError(f"result-cache.direct-read must be 'auto' or 'never', not {mode!r}")
    return mode


def _direct_allowed() -> bool:
    try:
        return direct_read_mode() == "auto"
    except ValueError:  # cached_compute reports it in the user's process
        return False


def _busy_wait(response: httpx.Response) -> float | None:
    """Seconds to wait before asking again when the server answered 503 with Retry-After
    (a limit that frees itself: uploads or downloads in flight), else None."""
    if response.status_code != 503:
        return None
    try:
        return min(max(float(response.headers["retry-after"]), 0.1), _MAX_BUSY_WAIT)
    except (KeyError, ValueError):
        return None


def _signing_key(value: SigningKey | str | None) -> SigningKey | None:
    if value is _FROM_CONFIG:
        return configured_key()
    if value is None or isinstance(value, SigningKey):
        return value
    return SigningKey(value)


def _batches(items: Iterable[str], size: int) -> list[list[str]]:
    unique = list(dict.fromkeys(items))
    return [unique[i:i + size] for i in range(0, len(unique), size)]


def _read_body(readinto: Callable[[memoryview], int], length: str | None, kind: str,
               dtype: str, shape: str) -> tuple[Any, str]:
    """Read a streamed body into one preallocated buffer while hashing it (once);
    (buffer, digest). An array is then a view of that buffer: no further copy.
    ``length``: the ``Content-Length`` (the body's framing: no byte past it is read)."""
    hasher = codec.content_hasher(kind, dtype, shape)
    if length is None:
        parts = bytearray()
        piece = memoryview(bytearray(_READ_BYTES))
        while n := readinto(piece):
            parts += piece[:n]
            hasher.update(piece[:n])
        return parts, hasher.hexdigest()
    size = int(length)
    if kind == "ndarray" and size != codec.array_nbytes(dtype, shape):
        # Checked before allocating: the headers alone never make us reserve memory.
        raise CacheProtocolError(f"Content-Length {size} does not match dtype {dtype} "
                                 f"and shape {shape}")
    # One preallocated array (not zero-filled) that the value will be a view of.
    view = memoryview(np.empty(size, dtype=np.uint8))
    pos = 0
    while pos < size:
        n = readinto(view[pos:pos + _READ_BYTES])
        if not n:
            raise CacheProtocolError(f"body ended after {pos} of {size} bytes")
        hasher.update(view[pos:pos + n])
        pos += n
    return view, hasher.hexdigest()


def _readinto_from(chunks: Iterator[bytes]) -> Callable[[memoryview], int]:
    """A ``readinto`` over an httpx body's chunks, taken as the connection delivers them
    (``iter_raw()`` without a size: with one, httpx gathers them in a ``BytesIO`` first)."""
    rest = memoryview(b"")

    def readinto(view: memoryview) -> int:
        nonlocal rest
        if not rest:
            rest = memoryview(next(chunks, b""))
        n = min(rest.nbytes, view.nbytes)
        view[:n] = rest[:n]
        rest = rest[n:]
        return n

    return readinto


def _send_get(conn: http.client.HTTPConnection, base: str, path: str,
              headers: dict[str, str]) -> http.client.HTTPResponse:
    prefix = urllib.parse.urlsplit(base).path.rstrip("/")
    conn.request("GET", prefix + path, headers=headers)
    return conn.getresponse()


def _expect(response: httpx.Response, status: int) -> None:
    if response.status_code != status:
        raise CacheProtocolError(f"{response.request.method} {response.request.url.path}: "
                                 f"expected {status}, got {response.status_code} "
                                 f"{_detail(response)}")


def _configured_client(url: str, token: str | None,
                       signing_key: SigningKey | None = None) -> CacheClient:
    """Unpickle a ``from_config`` client: this process's own URL and token win over the
    sender's; the sender's signing key wins over this process's (it hashed the tasks)."""
    key = signing_key or _own_key()
    own_url = dask.config.get("result-cache.url", None)
    if not own_url:
        return CacheClient.shared(url, token, from_config=True, signing_key=key)
    # The sender's token is never sent to a URL the sender did not choose.
    return CacheClient.shared(own_url, dask.config.get("result-cache.token", None),
                              from_config=True, signing_key=key)


def _explicit_client(url: str, token: str | None,
                     signing_key: SigningKey | None = None) -> CacheClient:
    """Unpickle a client made for an explicit URL: everything as sent (this process's own
    signing key only if the sender had none)."""
    return CacheClient.shared(url, token, signing_key=signing_key or _own_key())


def _own_key() -> SigningKey | None:
    """This (worker) process's configured key; a malformed one is reported, not fatal here:
    the task must not fail for it, and without a key nothing is loaded unchecked that the
    sender would have checked (the sender had no key either)."""
    try:
        return configured_key()
    except (TypeError, ValueError) as exc:
        warn_once(f"result cache: ignoring this process's result-cache.signing-key: {exc}",
                  key="bad signing key")
        return None


def _detail(response: httpx.Response) -> str:
    """The server's reason, for a message: the ``detail`` of a JSON error, else a short
    note of what answered (never a page of HTML from whatever listens at that address)."""
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind == "application/json":
        try:
            response.read()
            return str(response.json().get("detail", ""))[:500]
        except Exception:  # noqa: S110 - falls through to the note below
            pass
    return (f"(a {kind or 'body without a content type'} answer, not the cache's JSON: is "
            "this a result cache server?)")
