"""An in-memory cache behind client_lib's own transport interface
(``client_lib.transport.interface.Transport``), for the pure logic above the transport: the
run, the rewrite, the policy and its budget, leases. Values go through the wire codec both
ways (what a server would store and serve), nothing else of HTTP. Not thread safe beyond
what the threaded scheduler needs (each call takes one lock). Faults are injected by
setting ``failing`` (``{"lookup": CacheUnavailable(...)}``: the next calls of that method
raise it) or ``lose_after`` (loads succeed that many times, then the server is gone)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

from client_lib.core.errors import CacheEntryUnavailable, CacheUnavailable
from client_lib.transport.interface import Transport
from client_lib.wire import codec


class FakeCache(Transport):
    def __init__(self, url: str = "memory://fake") -> None:
        self.url = url
        self.signing_key = None
        self.objects: dict[str, codec.Encoded] = {}
        self.seconds: dict[str, float] = {}
        self.leases: dict[str, str] = {}  # hash -> holder
        self.calls: Counter[str] = Counter()
        self.runs: list[dict[str, Any]] = []
        self.recipes: dict[str, dict[str, Any]] = {}  # slot -> record, of held entries
        self.recipes_sent: list[list[str]] = []  # the hashes of each record_recipes
        self.why: list[dict[str, Any]] = []
        self.failing: dict[str, Exception] = {}
        self.lose_after: int | None = None
        self._lock = threading.Lock()

    def _call(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1
        if name in self.failing:
            raise self.failing[name]

    # -- the user's process -------------------------------------------------------------

    def lookup(self, hashes: Iterable[str]) -> set[str]:
        self._call("lookup")
        return {h for h in hashes if h in self.objects}

    def entry(self, task_hash: str) -> dict[str, Any] | None:
        self._call("entry")
        if task_hash not in self.objects:
            return None
        return {"compute_seconds": self.seconds[task_hash]}

    def untrusted_among(self, hashes: Iterable[str]) -> set[str]:
        self._call("untrusted_among")
        return set()

    def report_untrusted(self, task_hash: str) -> None:
        self._call("report_untrusted")

    def post_run(self, summary: dict[str, Any]) -> None:
        self._call("post_run")
        self.runs.append(summary)

    def record_recipes(self, recipes: list[dict[str, Any]]) -> None:
        self._call("record_recipes")
        with self._lock:
            self.recipes_sent.append([r["hash"] for r in recipes])
            for r in recipes:  # as the server: only those of the entries it holds
                if r["hash"] in self.objects:
                    self.recipes[r["slot"]] = {"hash": r["hash"], "held": True,
                                               "recipe": json.dumps(r["recipe"])}

    def previous_recipes(self, slots: list[str], labels: list[str]
                         ) -> tuple[dict[str, dict[str, Any]], set[str]]:
        self._call("previous_recipes")
        with self._lock:
            return {s: dict(self.recipes[s]) for s in slots if s in self.recipes}, set()

    def post_run_why(self, run_id: str, why: dict[str, Any]) -> None:
        self._call("post_run_why")
        self.why.append(why)

    # -- leases -------------------------------------------------------------------------

    def acquire_leases(self, hashes: Iterable[str], holder: str,
                       ttl: float) -> tuple[set[str], set[str], set[str]]:
        self._call("acquire_leases")
        granted, stored, held = set(), set(), set()
        with self._lock:
            for h in hashes:
                if h in self.objects:
                    stored.add(h)
                elif self.leases.setdefault(h, holder) == holder:
                    granted.add(h)
                else:
                    held.add(h)
        return granted, stored, held

    def renew_leases(self, estimates: dict[str, float | None], holder: str,
                     ttl: float) -> set[str]:
        self._call("renew_leases")
        return {h for h in estimates if self.leases.get(h) == holder}

    def release_leases(self, hashes: Iterable[str], holder: str) -> int:
        self._call("release_leases")
        with self._lock:
            mine = [h for h in hashes if self.leases.get(h) == holder]
            for h in mine:
                del self.leases[h]
        return len(mine)

    def lease_status(self, task_hash: str) -> dict[str, Any]:
        self._call("lease_status")
        return {"leased": task_hash in self.leases, "stored": task_hash in self.objects,
                "ttl": None, "estimate": None}

    # -- objects ------------------------------------------------------------------------

    def put(self, task_hash: str, value: Any, compute_seconds: float, label: str, *,
            ttl: float | None = None, overwrite: bool = False, run: str | None = None
            ) -> bool:
        self._call("put")
        enc = value if isinstance(value, codec.Encoded) else codec.encode(value)
        self._keep(task_hash, enc, compute_seconds, overwrite)
        return True

    def put_many(self, items: list[tuple[str, codec.Encoded, float, str, float | None,
                                         str | None]]) -> list[bool]:
        self._call("put_many")
        for task_hash, enc, seconds, *_ in items:
            self._keep(task_hash, enc, seconds, False)
        return [True] * len(items)

    def _keep(self, task_hash: str, enc: codec.Encoded, seconds: float,
              overwrite: bool) -> None:
        with self._lock:
            if overwrite or task_hash not in self.objects:
                self.objects[task_hash] = codec.Encoded(enc.kind, enc.dtype, enc.shape,
                                                        enc.type_name,
                                                        memoryview(bytes(enc.body)),
                                                        enc.digest)
                self.seconds[task_hash] = seconds
            self.leases.pop(task_hash, None)  # a store releases its lease

    def get(self, task_hash: str, run: str | None = None) -> Any:
        self._call("get")
        with self._lock:
            if self.lose_after is not None:
                if self.lose_after <= 0:
                    raise CacheUnavailable(f"GET {task_hash}: the fake server is gone")
                self.lose_after -= 1
            enc = self.objects.get(task_hash)
        if enc is None:
            raise CacheEntryUnavailable(task_hash, "not found")
        return codec.decode(enc.kind, enc.dtype, enc.shape, bytearray(enc.body))

    def delete(self, task_hash: str) -> bool:
        self._call("delete")
        with self._lock:
            self.seconds.pop(task_hash, None)
            return self.objects.pop(task_hash, None) is not None
