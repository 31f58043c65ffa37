"""What the commands that talk to a running server share: ``--url``, ``--token``, requests.

The URL comes from ``--url``, else ``RESULT_CACHE_URL``, else ``DASK_RESULT_CACHE__URL`` (the
client's setting), else ``http://127.0.0.1:8780``; the token from ``--token``, else
``RESULT_CACHE_TOKEN``, else ``DASK_RESULT_CACHE__TOKEN``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import click
import httpx

from client_lib.core.errors import access_hint

__all__ = ["DEFAULT_URL", "ServerConnection", "for_each_entry", "server_options"]

DEFAULT_URL = "http://127.0.0.1:8780"


def _from_env(*names: str, default: str | None = None) -> str | None:
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    return default


class ServerConnection:
    """One server, one token; every failure becomes a ``click.ClickException``."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url.rstrip("/")
        self.token_given = bool(token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=30.0)

    def request(self, method: str, path: str, *, ok: tuple[int, ...] = (200,),
                **kwargs: Any) -> httpx.Response:
        """The response if its status is in ``ok`` (404 may be listed to handle it)."""
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise click.ClickException(f"cannot reach {self.url}: {exc}") from exc
        if response.status_code in ok:
            return response
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        hint = ""
        if response.status_code in (401, 403):
            hint = "; " + access_hint(response.status_code, self.token_given,
                                      "pass --token or set RESULT_CACHE_TOKEN")
        raise click.ClickException(
            f"{method} {self.url}{path}: {response.status_code} {detail}{hint}"
        )


def for_each_entry(server: ServerConnection, task_hashes: tuple[str, ...], method: str,
                   path: str, done: str) -> None:
    """``method path.format(task_hash)`` for each hash; echo ``done`` or "not found"; exit 1
    if any hash was not found."""
    missing = 0
    for task_hash in task_hashes:
        response = server.request(method, path.format(task_hash), ok=(200, 204, 404))
        if response.status_code == 404:
            missing += 1
            click.echo(f"not found: {task_hash}", err=True)
        else:
            click.echo(f"{done} {task_hash}")
    if missing:
        raise SystemExit(1)


def server_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--url`` and ``--token``; the command receives ``server: ServerConnection``."""

    @click.option(
        "--url",
        default=lambda: _from_env(
            "RESULT_CACHE_URL", "DASK_RESULT_CACHE__URL", default=DEFAULT_URL
        ),
        show_default=f"env RESULT_CACHE_URL, DASK_RESULT_CACHE__URL or {DEFAULT_URL}",
        help="the cache server",
    )
    @click.option(
        "--token",
        default=lambda: _from_env("RESULT_CACHE_TOKEN", "DASK_RESULT_CACHE__TOKEN"),
        show_default="env RESULT_CACHE_TOKEN or DASK_RESULT_CACHE__TOKEN",
        help="bearer token, when the server requires one",
    )
    @functools.wraps(command)
    def with_server(url: str, token: str | None, **kwargs: Any) -> Any:
        return command(server=ServerConnection(url, token), **kwargs)

    return with_server
