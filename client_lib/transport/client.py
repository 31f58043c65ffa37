"""``CacheClient``: the HTTP side of docs/protocol.md for the user's process (lookup)
and the workers (load, store).

Built from :mod:`.pool` (connections, failover over replicas, busy retries: written once),
:mod:`.status` (what an answer means), :mod:`.downloads` (bodies read into the value's
buffer), :mod:`.direct` (reads in place) and :mod:`.signatures`. Bodies stream in ~1 MiB
pieces both ways. Every method raises :class:`CacheUnavailable` when no server answers,
and :class:`CacheAccessDenied` when one refuses the token (401/403), so callers decide
how to degrade.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import urllib.parse
from collections.abc import Iterable
from typing import Any

import httpx

from ..core.config import setting
from ..core.errors import (
    CacheAccessDenied,
    CacheProtocolError,
)
from ..wire import batch, codec, headers
from ..wire.bounds import LEASE_BATCH, LOOKUP_BATCH, MAX_COMPUTE_SECONDS, MAX_RECIPE_BATCH
from . import signatures, staging
from .downloads import Downloads
from .endpoints import normalize_urls
from .interface import Transport
from .loads import Loads
from .pool import Pool
from .signatures import FROM_CONFIG
from .status import detail, expect

__all__ = ["CacheClient"]

logger = logging.getLogger("client_lib")


class CacheClient(Loads, Transport):
    """A client of one cache server over HTTP (the :class:`~.interface.Transport` every
    run uses, unless handed another). Thread safe; cheap to pickle (only URL and token
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

    ``signing_key`` (default: this process's ``result-cache.signing-key`` and
    ``trusted-keys``; a secret string, an ``ed25519:`` private key, a
    :class:`~client_lib.core.signing.SigningKey` or
    :class:`~client_lib.core.public_keys.Ed25519Keys`) signs every store and is checked on every
    load before anything is unpickled (docs/protocol.md, "Signed results"). It travels with
    the client to the workers, never to the server; a worker uses its own configured key
    only when the sender has none. A client with only trusted keys stores nothing
    (:meth:`put` answers ``False``): it cannot sign.
    """

    _shared: dict[tuple[str, str | None, bool, int, signatures.Keys | None],
                   CacheClient] = {}
    _shared_lock = threading.Lock()

    def __init__(self, url: str, token: str | None = None, *, from_config: bool = False,
                 signing_key: signatures.Keys | str | None = FROM_CONFIG) -> None:
        self.url = normalize_urls(url)
        self.token = token
        self.from_config = from_config
        self.signing_key = signatures.resolve_key(signing_key)
        self.pool = Pool(self.url, token)
        self._downloads = Downloads()
        # Set once the server refuses a store: later stores skip the upload.
        self._store_refused: CacheAccessDenied | None = None
        # Set once a location proves this process cannot see the server's storage.
        self._storage_unseen = False
        # Set once a staging place proves this process cannot write it (direct writes).
        self._staging_unseen = False

    @classmethod
    def shared(cls, url: str, token: str | None = None, *, from_config: bool = False,
               signing_key: signatures.Keys | str | None = FROM_CONFIG) -> CacheClient:
        """The process-wide client for ``url`` and key (a fork gets its own pool)."""
        signing_key = signatures.resolve_key(signing_key)
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

    def warm(self) -> None:
        """Build the connection pool and open a connection (``GET /healthz``, no token, no
        hit counted): a process's first load then pays neither for httpx's transport
        imports (httpcore, h11: built with the first ``httpx.Client``) nor for connecting.
        Raises like any request (:class:`CacheUnavailable`). docs/design/transport.md,
        Warming the workers."""
        self.pool.skip_light_path()  # the pool, not the first-request path (light.py)
        expect(self.pool.request("GET", "/healthz"), 200)

    def close(self) -> None:
        self.pool.close()
        self._downloads.close()

    # -- index --------------------------------------------------------------------------

    def lookup(self, hashes: Iterable[str]) -> set[str]:
        """Which of ``hashes`` (32-hex task hashes) the server holds: one request per
        ``LOOKUP_BATCH`` distinct hashes, through the packed route (no JSON either way)."""
        hashes = list(hashes if isinstance(hashes, set | frozenset) else dict.fromkeys(hashes))
        found: set[str] = set()
        for start in range(0, len(hashes), LOOKUP_BATCH):
            chunk = hashes[start:start + LOOKUP_BATCH]
            response = self.pool.request(
                "POST", "/v1/lookup/packed", content="".join(chunk).encode("ascii"),
                headers={"Content-Type": "application/octet-stream"})
            expect(response, 200)
            flags = response.content
            if len(flags) != len(chunk):
                raise CacheProtocolError(f"lookup answered {len(flags)} flags for "
                                         f"{len(chunk)} hashes")
            found.update(itertools.compress(chunk, flags))
        return found

    def post_run(self, summary: dict[str, Any]) -> None:
        """Record a run summary (docs/protocol.md, "Runs")."""
        expect(self.pool.request("POST", "/v1/runs", json=summary), 200)

    def record_recipes(self, recipes: list[dict[str, Any]]) -> None:
        """``POST /v1/recipes``, ``MAX_RECIPE_BATCH`` at a time."""
        for start in range(0, len(recipes), MAX_RECIPE_BATCH):
            expect(self.pool.request("POST", "/v1/recipes", json={
                "recipes": recipes[start:start + MAX_RECIPE_BATCH]}), 200)

    def post_run_why(self, run_id: str, why: dict[str, Any]) -> None:
        """``POST /v1/runs/{run_id}/why``."""
        expect(self.pool.request("POST", f"/v1/runs/{run_id}/why", json=why), 200)

    def previous_recipes(self, slots: list[str], labels: list[str]
                         ) -> tuple[dict[str, dict[str, Any]], set[str]]:
        """``POST /v1/recipes/previous``, ``MAX_RECIPE_BATCH`` slots at a time."""
        previous: dict[str, dict[str, Any]] = {}
        unrecorded: set[str] = set()
        for start in range(0, max(len(slots), 1), MAX_RECIPE_BATCH):
            response = self.pool.request("POST", "/v1/recipes/previous", json={
                "slots": slots[start:start + MAX_RECIPE_BATCH],
                "labels": labels if start == 0 else []})
            expect(response, 200)
            body = response.json()
            previous.update(body["previous"])
            unrecorded.update(body["unrecorded"])
        return previous, unrecorded

    def stats(self) -> dict[str, Any]:
        response = self.pool.request("GET", "/v1/stats")
        expect(response, 200)
        return response.json()

    def entry(self, task_hash: str) -> dict[str, Any] | None:
        """The entry's manifest as the server describes it, or ``None``."""
        response = self.pool.request("GET", f"/v1/entries/{task_hash}")
        if response.status_code == 404:
            return None
        expect(response, 200)
        return response.json()

    def delete(self, task_hash: str) -> bool:
        response = self.pool.request("DELETE", f"/v1/entries/{task_hash}")
        if response.status_code == 404:
            return False
        expect(response, 204)
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
        for chunk in _batches(hashes, LEASE_BATCH):
            # The packed route: no JSON either way, one byte per hash back (0, 1, 2).
            response = self.pool.request(
                "POST", "/v1/leases/packed", params={"holder": holder, "ttl": repr(ttl)},
                content="".join(chunk).encode("ascii"),
                headers={"Content-Type": "application/octet-stream"})
            expect(response, 200)
            flags = response.content
            if len(flags) != len(chunk) or flags.translate(None, b"\x00\x01\x02"):
                raise CacheProtocolError(f"lease answered {len(flags)} flags for "
                                         f"{len(chunk)} hashes")
            granted.update(itertools.compress(chunk, (f == 0 for f in flags)))
            stored.update(itertools.compress(chunk, (f == 1 for f in flags)))
            held.update(itertools.compress(chunk, (f == 2 for f in flags)))
        return granted, stored, held

    def renew_leases(self, estimates: dict[str, float | None], holder: str,
                     ttl: float) -> set[str]:
        """Extend ``holder``'s leases of these hashes by ``ttl`` seconds (re-taking any
        that expired and nobody took); each maps to how long its task is expected to
        take, where known. Returns the hashes still leased to ``holder``."""
        renewed: set[str] = set()
        for chunk in _batches(estimates, LEASE_BATCH):
            known = {h: estimates[h] for h in chunk if estimates[h] is not None}
            body = self._lease_call("/v1/leases/renew", {
                "holder": holder, "ttl": ttl, "hashes": chunk, "estimates": known})
            renewed.update(body["renewed"])
        return renewed

    def release_leases(self, hashes: Iterable[str], holder: str) -> int:
        """Drop ``holder``'s leases of ``hashes`` (others' leases are untouched)."""
        released = 0
        for chunk in _batches(hashes, LEASE_BATCH):
            body = self._lease_call("/v1/leases/release", {"holder": holder,
                                                           "hashes": chunk})
            released += int(body["released"])
        return released

    def lease_status(self, task_hash: str) -> dict[str, Any]:
        """``{"leased", "stored", "ttl", "estimate"}`` for one hash."""
        response = self.pool.request("GET", f"/v1/leases/{task_hash}")
        expect(response, 200)
        return response.json()

    def _lease_call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.pool.request("POST", path, json=body)
        expect(response, 200)
        return response.json()

    # -- stores -------------------------------------------------------------------------

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
        if signatures.why_no_stores(self.signing_key) is not None:
            return False  # runs never ask (their policy is none); nobody could load it
        enc = value if isinstance(value, codec.Encoded) else codec.encode(value)
        sent = {
            headers.KIND: enc.kind,
            headers.DIGEST: enc.digest,
            headers.COMPUTE_SECONDS: repr(_bounded_seconds(compute_seconds)),
            headers.LABEL: urllib.parse.quote(label, safe=""),
            headers.TYPE: enc.type_name,
            "Content-Length": str(enc.nbytes),
        }
        if enc.kind == "ndarray":
            sent[headers.DTYPE] = enc.dtype
            sent[headers.SHAPE] = enc.shape
        if self.signing_key is not None:
            sent[headers.SIGNATURE] = signatures.sign(self.signing_key, task_hash, enc)
        if ttl is not None:
            sent[headers.TTL] = repr(float(ttl))
        if run is not None:
            sent[headers.RUN] = run
        params = {"overwrite": "true"} if overwrite else None
        response = None
        if not self._staging_unseen and staging.allowed(enc.nbytes):
            response = self._put_direct(task_hash, enc, sent, params)
        if response is None:
            # memoryview slices of the value itself: h11 copies each once into the request
            # bytes anyway, so converting them to ``bytes`` first would copy everything twice.
            response = self._store("PUT", f"/v1/objects/{task_hash}", body=enc.chunks,
                                   headers=sent, params=params)
        if response.status_code in (200, 201):
            return True
        if response.status_code in (413, 507):  # too large / no space: not an error
            return False
        raise CacheProtocolError(f"PUT {task_hash}: {response.status_code} "
                                 f"{detail(response)}")

    def _put_direct(self, task_hash: str, enc: codec.Encoded, sent: dict[str, str],
                    params: dict[str, str] | None) -> httpx.Response | None:
        """Store ``enc`` by a direct write (:mod:`.staging`): the commit's response, or None
        when it could not be done (upload it instead). A storage this process cannot write
        ends direct writes for the client."""
        request = {"kind": enc.kind, "dtype": enc.dtype or None, "shape": enc.shape or None}
        answer = self._store("POST", "/v1/staging", json=request)
        if answer.status_code in (413, 507):
            return answer  # could never be stored: not an error
        if answer.status_code != 200:
            return None  # a server without direct writes, or storage that takes none
        try:
            place = answer.json()
            staged = staging.stage_files(place, enc)
        except staging.DirectWriteFailed as exc:
            if exc.unreachable:
                self._staging_unseen = True
            logger.info("result cache: direct write of %s failed (%s); uploading", task_hash,
                        exc)
            return None
        except (ValueError, TypeError, AttributeError) as exc:
            logger.info("result cache: bad staging answer for %s: %r", task_hash, exc)
            return None
        try:
            response = self._store("POST", f"/v1/objects/{task_hash}/commit",
                                   headers=staging.commit_headers(sent, str(place["id"])),
                                   params=params)
        finally:
            staged.settle()  # the directory is gone if committed or refused
        if response.status_code in (200, 201, 413, 507):
            return response
        if response.status_code == 404:  # the server did not find what we wrote: another
            self._staging_unseen = True  # directory at the same path; upload from now on
        logger.info("result cache: the commit of %s was answered %s (%s); uploading",
                    task_hash, response.status_code, detail(response))
        return None

    def put_many(self, items: list[tuple[str, codec.Encoded, float, str, float | None,
                                         str | None]]) -> list[bool]:
        """Store small encoded values (``(task_hash, encoded, compute_seconds, label,
        ttl, run id)``, bodies below 16 MiB) in one ``POST /v1/objects/batch``: the server makes
        them durable together (one group commit) before it answers. Per item, whether the
        server now holds it. Raises like :meth:`put` for the whole request."""
        if self._store_refused is not None:
            raise self._store_refused
        if signatures.why_no_stores(self.signing_key) is not None:
            return [False] * len(items)
        payload = batch.pack(self._batch_item(*item) for item in items)
        response = self._store("POST", "/v1/objects/batch", body=lambda: payload,
                               headers={"Content-Type": batch.MEDIA_TYPE})
        expect(response, 200)
        results = response.json()["results"]
        if len(results) != len(items):
            raise CacheProtocolError(f"batch of {len(items)} answered with {len(results)}")
        return [r["status"] in (200, 201) for r in results]

    def _batch_item(self, task_hash: str, enc: codec.Encoded, seconds: float, label: str,
                    ttl: float | None, run: str | None) -> tuple[dict[str, Any], memoryview]:
        meta: dict[str, Any] = {
            "hash": task_hash, "kind": enc.kind, "digest": enc.digest, "nbytes": enc.nbytes,
            "label": label, "type": enc.type_name,
            "compute_seconds": _bounded_seconds(seconds)}
        if enc.kind == "ndarray":
            meta["dtype"], meta["shape"] = enc.dtype, enc.shape
        if self.signing_key is not None:
            meta["signature"] = signatures.sign(self.signing_key, task_hash, enc)
        if ttl is not None:
            meta["ttl"] = float(ttl)
        if run is not None:
            meta["run"] = run
        return meta, enc.body

    def _store(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A store request; a refused token is remembered (later stores skip the upload)."""
        try:
            return self.pool.request(method, path, **kwargs)
        except CacheAccessDenied as exc:
            self._store_refused = exc
            raise


def _bounded_seconds(seconds: float) -> float:
    return min(max(float(seconds), 0.0), MAX_COMPUTE_SECONDS)


def _batches(items: Iterable[str], size: int) -> list[list[str]]:
    unique = list(dict.fromkeys(items))
    return [unique[i:i + size] for i in range(0, len(unique), size)]


def _configured_client(url: str, token: str | None,
                       signing_key: signatures.Keys | None = None) -> CacheClient:
    """Unpickle a ``from_config`` client: this process's own URL and token win over the
    sender's; the sender's signing key wins over this process's (it hashed the tasks)."""
    key = signing_key or signatures.own_key()
    own_url = setting("url")
    if not own_url:
        return CacheClient.shared(url, token, from_config=True, signing_key=key)
    # The sender's token is never sent to a URL the sender did not choose.
    return CacheClient.shared(own_url, setting("token"), from_config=True, signing_key=key)


def _explicit_client(url: str, token: str | None,
                     signing_key: signatures.Keys | None = None) -> CacheClient:
    """Unpickle a client made for an explicit URL: everything as sent (this process's own
    signing key only if the sender had none)."""
    return CacheClient.shared(url, token, signing_key=signing_key or signatures.own_key())
