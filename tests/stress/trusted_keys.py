"""Campaign: a reader of a team cache forges results (issue 29, public-key signatures).

A writer stores ``--entries`` results with ``cached_compute``. A reader who can also write
to the cache (no tokens here; a write token otherwise) replaces every entry (DELETE + PUT,
valid digests) by a pickle whose unpickling creates a marker file, signed as well as he can.
With an HMAC team secret he holds the secret (every reader does, to check signatures) and
signs validly. With Ed25519 he holds only the writer's public key, and each quarter of the
entries gets another try: signed with an HMAC secret of his own, with an Ed25519 key of his
own, the genuine signature replayed over a body forged to the genuine xxh3 digest, a
signature made up under the writer's key id. The writer then computes again. Counted:
payloads that ran, wrong values, loads, untrusted entries; and the entries the reader
stored when he computed ``--entries`` new results with ``policy="all"`` himself.

    python -m tests.stress.trusted_keys --entries 48
"""

from __future__ import annotations

import pickle
import secrets
import tempfile
import uuid
from pathlib import Path
from typing import Any

import dask
import httpx

from cache_server.launch import start_server
from client_lib import cached_compute, last_report
from client_lib.core.public_keys import Ed25519Keys, new_keypair
from client_lib.core.signing import SigningKey
from client_lib.wire.body_hash import body_root
from tests.reliability._xxh3_forgery import forge
from tests.server.wire import Encoded, put
from tests.stress._common import campaign_parser, entry_hashes, print_report
from tests.stress.poisoned import Payload, square

__all__ = ["run"]


def _signed(signer: SigningKey | Ed25519Keys, task_hash: str, body: bytes) -> str:
    enc = Encoded("pickle", body)
    return signer.sign(task_hash, "pickle", "", "", enc.digest, body_root("pickle", "", "", body))


def _forgery(
    i: int, task_hash: str, payload: bytes, genuine: httpx.Response, reader: dict[str, Any]
) -> tuple[bytes, str]:
    """The ``i``-th forgery (body, signature) a reader holding ``reader``'s keys makes."""
    if reader["signing-key"] is not None:  # HMAC: the reader holds the team secret
        return payload, _signed(SigningKey(reader["signing-key"]), task_hash, payload)
    kind = i % 4
    if kind == 0:  # an HMAC secret of his own
        return payload, _signed(SigningKey(secrets.token_hex(32)), task_hash, payload)
    if kind == 1:  # an Ed25519 key of his own
        return payload, _signed(Ed25519Keys(new_keypair()[0]), task_hash, payload)
    signature = genuine.headers["x-result-signature"]
    if kind == 2:  # the genuine signature over a body with the genuine xxh3 digest
        return forge(b"pickle\n\n\n", genuine.content, payload), signature
    version, kid, _, _ = signature.split(".")  # a made-up signature under the writer's id
    body = body_root("pickle", "", "", payload)
    return payload, f"{version}.{kid}.{body}.{secrets.token_hex(64)}"


def _round(
    workdir: Path, entries: int, writer: dict[str, Any], reader: dict[str, Any]
) -> dict[str, Any]:
    markers = workdir / uuid.uuid4().hex
    markers.mkdir()
    ns = uuid.uuid4().hex
    values = [dask.delayed(square, pure=True)(n) for n in range(entries)]
    with start_server(workdir / uuid.uuid4().hex) as server:
        with dask.config.set({f"result-cache.{k}": v for k, v in writer.items()}):
            cached_compute(
                *values, cache=server.url, namespace=ns, policy="all", scheduler="threads"
            )
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for i, task_hash in enumerate(entry_hashes(client)):
                payload = pickle.dumps(Payload(markers / f"ran-{i}", {"n": -1}))
                genuine = client.get(f"/v1/objects/{task_hash}")
                body, signature = _forgery(i, task_hash, payload, genuine, reader)
                assert client.delete(f"/v1/entries/{task_hash}").status_code == 204
                assert (
                    put(
                        client,
                        task_hash,
                        Encoded("pickle", body),
                        overrides={"signature": signature},
                    ).status_code
                    == 201
                )
            with dask.config.set({f"result-cache.{k}": v for k, v in writer.items()}):
                again = cached_compute(*values, cache=server.url, namespace=ns, scheduler="threads")
                report = last_report()
            before = len(entry_hashes(client))
            with dask.config.set({f"result-cache.{k}": v for k, v in reader.items()}):
                cached_compute(
                    *[dask.delayed(square, pure=True)(-n - 1) for n in range(entries)],
                    cache=server.url,
                    namespace=ns,
                    policy="all",
                    scheduler="threads",
                )
                reader_report = last_report()
            reader_stored = len(entry_hashes(client)) - before
    return {
        "replaced": entries,
        "payloads_run": len(list(markers.iterdir())),
        "wrong_values": sum(v != square(n) for n, v in enumerate(again)),
        "loaded": report.loaded,
        "untrusted_reported": report.untrusted,
        "reader_stored": reader_stored,
        "reader_says": reader_report.not_storing,
    }


def run(workdir: Path, *, entries: int) -> dict[str, Any]:
    secret = secrets.token_hex(32)
    private, public = new_keypair()
    hmac_team = {"signing-key": secret, "trusted-keys": None}
    return {
        "hmac_reader": _round(workdir, entries, hmac_team, hmac_team),
        "ed25519_reader": _round(
            workdir,
            entries,
            {"signing-key": private, "trusted-keys": None},
            {"signing-key": None, "trusted-keys": public},
        ),
    }


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=48)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        print_report("trusted_keys", run(Path(tmp), entries=args.entries))


if __name__ == "__main__":
    main()
