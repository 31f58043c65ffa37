"""``dask-cache keygen``: print a new random signing key (docs/protocol.md, "Signed results").

The key belongs to the clients (``result-cache.signing-key``, env
``DASK_RESULT_CACHE__SIGNING_KEY``), never to the server: give the same one to every user
and worker of a team.
"""

from __future__ import annotations

import ast
import secrets

import click

__all__ = ["keygen", "new_key"]


def new_key() -> str:
    """64 random hex characters (256 bits). Never text that Dask would read back from an
    environment variable as a number (all digits, or like ``1e5``), which would change it."""
    while True:
        key = secrets.token_hex(32)
        try:
            ast.literal_eval(key)
        except (ValueError, SyntaxError):
            return key


@click.command()
def keygen() -> None:
    """Print a new random signing key for result-cache.signing-key
    (export DASK_RESULT_CACHE__SIGNING_KEY=$(dask-cache keygen))."""
    click.echo(new_key())
