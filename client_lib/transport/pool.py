"""The servers of one cache as one pool of connections, and the one place where a request
fails over to the next replica or waits out a busy server.

One pooled ``httpx.Client`` per :class:`Pool` (built on first use; a process's first few
requests go over the standard library instead, :mod:`.light`). The URL may list several
replicas (:mod:`.endpoints`): :meth:`Pool.failover` tries each in turn, and an attempt at
one server that cannot connect or gets a server error (:class:`ServerFailed`) moves on to
the next, before :class:`CacheUnavailable`. :func:`while_busy` asks a server again, up to
:data:`BUSY_RETRIES` times, when it answers 503 with ``Retry-After``. Thread safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from ..core.errors import CacheUnavailable
from . import light
from .endpoints import Endpoints
from .status import busy_wait, check_status, detail, server_error

__all__ = ["BUSY_RETRIES", "Busy", "Pool", "ServerFailed", "while_busy"]

T = TypeVar("T")
_TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=300.0, pool=60.0)
#: A server answering 503 with Retry-After is asked again this often, waiting at most
#: ``status.MAX_BUSY_WAIT`` each time, before it counts as failed.
BUSY_RETRIES = 5


class ServerFailed(Exception):
    """One server did not answer (no connection, a server error): try the next."""


@dataclass(frozen=True)
class Busy:
    """An attempt's answer "busy: ask again in ``seconds``"."""

    seconds: float


def while_busy(attempt: Callable[[bool], T | Busy]) -> T:
    """``attempt(last)`` until it returns other than :class:`Busy` (sleeping as told in
    between); ``last`` is True on the final attempt, which must not return :class:`Busy`."""
    for n in range(BUSY_RETRIES + 1):
        result = attempt(n == BUSY_RETRIES)
        if not isinstance(result, Busy):
            return result
        time.sleep(result.seconds)
    raise AssertionError("unreachable: the last attempt returns or raises")


class Pool:
    """The connections to the servers of one cache (``url``: comma-separated replicas)."""

    def __init__(self, url: str, token: str | None) -> None:
        self.endpoints = Endpoints(url)
        self.token = token
        self._http: httpx.Client | None = None
        self._lock = threading.Lock()
        # Requests left to send over the standard library before the pool (light.py).
        self._light_left = light.FIRST_REQUESTS

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            with self._lock:
                if self._http is None:
                    # Plain HTTP needs no TLS context (building one costs ~40 ms).
                    verify = any(u.startswith("https://") for u in self.endpoints.urls)
                    self._http = httpx.Client(timeout=_TIMEOUT, headers=self.headers(),
                                              verify=verify,
                                              limits=httpx.Limits(max_connections=64))
        return self._http

    def skip_light_path(self) -> None:
        """Send every later request through the pool (a worker being warmed)."""
        self._light_left = 0

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def failover(self, what: str, attempt: Callable[[str], T]) -> T:
        """``attempt(base)`` at each server in turn until one does not raise
        :class:`ServerFailed`; :class:`CacheUnavailable` naming every failure if none."""
        failures: list[str] = []
        for base in self.endpoints.order():
            try:
                result = attempt(base)
            except ServerFailed as exc:
                failures.append(f"{base}: {exc}")
                self.endpoints.failed(base)
                continue
            self.endpoints.answered(base)
            return result
        raise CacheUnavailable(f"{what} failed: {'; '.join(failures)}")

    def request(self, method: str, path: str, *,
                body: Callable[[], Iterable[Any] | bytes] | None = None,
                **kwargs: Any) -> httpx.Response:
        """One request, failed over and retried while busy; the answer, its status
        checked (:func:`~.status.check_status`). ``body`` makes a fresh request body for
        each attempt (a stream is read once)."""

        def at(base: str) -> httpx.Response:
            def once(last: bool) -> httpx.Response | Busy:
                if body is not None:
                    kwargs["content"] = body()
                try:
                    response = self.send(method, base + path, kwargs)
                except httpx.HTTPError as exc:
                    raise ServerFailed(str(exc)) from exc
                wait = None if last else busy_wait(response)
                if wait is None:
                    return response
                response.close()
                return Busy(wait)

            response = while_busy(once)
            if server_error(response.status_code):
                raise ServerFailed(f"{response.status_code} {detail(response)}")
            return response

        response = self.failover(f"{method} {path}", at)
        check_status(response, bool(self.token))
        return response

    def send(self, method: str, url: str, kwargs: dict[str, Any]) -> httpx.Response:
        """A process's first few requests go over the standard library, until the pool
        exists (:mod:`.light`: building it imports httpx's transport); then the pool."""
        if self._http is None and self._light_left > 0:
            response = light.request(method, url, self.headers(), **kwargs)
            if response is not None:
                self._light_left -= 1  # racy across threads: a request more or less
                return response
        return self.http.request(method, url, **kwargs)
