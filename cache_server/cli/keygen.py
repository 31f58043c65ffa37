"""``dask-cache keygen``: print a new random signing key (docs/protocol.md, "Signed results").

The key belongs to the clients (``result-cache.signing-key``, env
``DASK_RESULT_CACHE__SIGNING_KEY``), never to the server: give the same one to every user
and worker of a team. With ``--ed25519``, a key pair instead (docs/protocol.md, "Public-key
signatures"): the private key for the writers' ``result-cache.signing-key``, the public one
for everyone's ``result-cache.trusted-keys``.
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
@click.option("--ed25519", is_flag=True,
              help="Print an Ed25519 key pair: 'signing-key: ed25519:...' for writers and "
                   "'trusted-key: ed25519:...' for readers (result-cache.trusted-keys).")
def keygen(ed25519: bool) -> None:
    """Print a new random signing key for result-cache.signing-key
    (export DASK_RESULT_CACHE__SIGNING_KEY=$(dask-cache keygen))."""
    if not ed25519:
        click.echo(new_key())
        return
    from client_lib.core.public_keys import new_keypair

    private, public = new_keypair()
    click.echo(f"signing-key: {private}")
    click.echo(f"trusted-key: {public}")
