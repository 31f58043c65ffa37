"""Campaign: what a writer's leases and run reports make Redis hold (issue 29, rows 8 and 9).

1. One client (one token) takes ``--lease-requests`` x ``--leases`` leases with a TTL of
   3600 s under as many holder names.
2. It posts ``--runs`` run reports of 5000 tasks, each task's key, label and reason at
   their 1024-character maximum (~17.6 MB of JSON each).

Each reports the statuses and the growth of the server's own Redis (``used_memory``).

    python -m tests.stress.writer_bounds --lease-requests 10 --leases 100000 --runs 8
"""

from __future__ import annotations

import secrets
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import redis

from cache_server.launch import start_server
from tests._servers import RedisProcess
from tests.stress._common import campaign_parser, print_report

__all__ = ["lease_flood", "run", "run_reports"]

MiB = 2**20


def _used(db: redis.Redis) -> int:
    return int(db.info("memory")["used_memory"])


def lease_flood(client: httpx.Client, db: redis.Redis, requests: int, n: int
                ) -> dict[str, Any]:
    before = _used(db)
    statuses = [client.post("/v1/leases", json={
        "holder": f"h{i}", "ttl": 3600, "hashes": [uuid.uuid4().hex for _ in range(n)]}
    ).status_code for i in range(requests)]
    return {"statuses": dict(Counter(statuses)),
            "lease_fields": sum(db.hlen(k) for k in db.scan_iter(match="*leases")),
            "redis_growth_mib": round((_used(db) - before) / MiB, 1)}


def run_reports(client: httpx.Client, db: redis.Redis, runs: int) -> dict[str, Any]:
    task = {"key": "k" * 1024, "label": "l" * 1024, "state": "computed", "reason": "r" * 1024}
    before = _used(db)
    statuses = [client.post("/v1/runs", json={
        "run_id": uuid.uuid4().hex, "started": 1000.0 + i, "tasks": 5000,
        "task_list": [task] * 5000}).status_code for i in range(runs)]
    return {"statuses": dict(Counter(statuses)),
            "redis_growth_mib": round((_used(db) - before) / MiB, 1)}


def run(workdir: Path, *, lease_requests: int, leases: int, runs: int) -> dict[str, Any]:
    own = RedisProcess(workdir / "redis")
    token = secrets.token_hex(24)
    try:
        db = redis.Redis.from_url(own.url)
        with start_server(workdir / "data", redis_url=own.url, redis_prefix="wb:",
                          env={"RESULT_CACHE_TOKENS": f"write:{token}"}) as server, \
                httpx.Client(base_url=server.url, timeout=600,
                             headers={"Authorization": f"Bearer {token}"}) as client:
            report = {"leases": lease_flood(client, db, lease_requests, leases)}
            report["runs"] = run_reports(client, db, runs)
            report["healthz"] = client.get("/healthz").status_code
            return report
    finally:
        own.stop()


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--lease-requests", type=int, default=10)
    parser.add_argument("--leases", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        started = time.monotonic()
        report = run(Path(workdir), lease_requests=args.lease_requests, leases=args.leases,
                     runs=args.runs)
        report["seconds"] = round(time.monotonic() - started, 1)
    print_report("writer_bounds", report)


if __name__ == "__main__":
    main()
