"""``dask-cache keygen``: print a new random signing key (docs/protocol.md, "Signed results").

The key belongs to the clients (``result-cache.signing-key``, env
``DASK_RESULT_CACHE__SIGNING_KEY``), never to the server: give the same one to every user
and worker of a team. With ``--ed25519``, a key pair instead (docs/protocol.md, "Public-key
signatures"): the private key for the writers' ``result-cache.signing-key``, the public one
for everyone's ``result-cache.trusted-keys``.
"""

from __future__ import annotations

import ast
import base64
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
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    click.echo(f"signing-key: {_ed25519_text(private.private_bytes_raw())}")
    click.echo(f"trusted-key: {_ed25519_text(private.public_key().public_bytes_raw())}")


def _ed25519_text(raw: bytes) -> str:
    """docs/protocol.md, "Public-key signatures": ``ed25519:`` and URL-safe base64 without
    padding (the server imports no client code but the protocol's facts in client_lib.wire)."""
    return "ed25519:" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
