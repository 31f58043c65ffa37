"""The compose file's ``sentinel`` profile as local processes, started with its own commands
(tests/deploy/_compose.py): a Redis primary, its replica, three sentinels (redis-server
``--sentinel``) and a cache server on ``redis+sentinel://``. Writers store without pause;
the primary is killed with SIGKILL. Every entry acknowledged before the kill is a hit again
within 30 s (the sentinels promote the replica, the server finds it through them), stores
are acknowledged again, no acknowledged entry is lost, while the index failed over the
server answered 503 with ``Retry-After`` and nothing else, and ``dask-cache gc`` beside it
afterwards (under the maintenance lease) finds nothing to drop (campaign 16,
tests/stress/failover.py)."""

from __future__ import annotations

import pytest

from tests.stress import failover

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_killed_primary_fails_over_and_loses_no_acknowledged_entry(tmp_path):
    report = failover.run_sentinel(tmp_path, entries=60)
    assert report["primary_now"] == "replica"  # the sentinels promoted it
    seconds = report["hit_again_after_seconds"]
    assert seconds is not None and seconds <= failover.FAILOVER_SECONDS, report
    assert report["acknowledged"] == report["entries"] == 60, report
    assert report["acknowledged_after_kill"] > 0  # stores work again
    assert report["lost"] == 0 and report["wrong_served"] == 0, report
    assert report["verified"] == report["found_at_end"] == 60
    assert report["indexed_entries"] == 60
    # maintenance after the failover: gc beside the server finds nothing to drop
    assert report["gc_after"]["dangling_entries_removed"] == 0
    assert report["gc_after"]["entries"] == 60
    unexpected = {answer for answer in report["answers"]
                  if answer not in ("200", "201", "503 with Retry-After", "transport error")}
    assert not unexpected, report["answers"]
