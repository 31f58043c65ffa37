"""A Redis Cluster loses a master (campaign 16, tests/stress/failover.py): three masters with
a replica each, a cache server on ``redis+cluster://``, writers storing without pause. The
master holding most entries is killed with SIGKILL; its replica takes over. Every master
held entries; every entry acknowledged before the kill is a hit again within 30 s; stores
are acknowledged again; nothing acknowledged is lost or served wrong; ``dask-cache gc``
beside the server afterwards finds nothing to drop. (The Sentinel campaign runs the
compose file's profile: tests/deploy/test_sentinel_profile.py.)"""

from __future__ import annotations

import pytest

from tests.stress import failover

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_killed_master_loses_no_acknowledged_entry(tmp_path):
    report = failover.run_cluster(tmp_path, entries=60, masters=3, replicas=1)
    assert len(report["per_master"]) == 3 and min(report["per_master"]) > 0, report
    assert report["masters_now"] == 3  # the replica is a master now
    seconds = report["hit_again_after_seconds"]
    assert seconds is not None and seconds <= failover.FAILOVER_SECONDS, report
    assert report["acknowledged"] == report["entries"] == 60, report
    assert report["acknowledged_after_kill"] > 0  # stores work again
    assert report["lost"] == 0 and report["wrong_served"] == 0, report
    assert report["verified"] == report["found_at_end"] == report["indexed_entries"] == 60
    # maintenance after the failover: gc beside the server finds nothing to drop
    assert report["gc_after"]["dangling_entries_removed"] == 0
    assert report["gc_after"]["entries"] == 60
    unexpected = {answer for answer in report["answers"]
                  if answer not in ("200", "201", "503 with Retry-After", "transport error")}
    assert not unexpected, report["answers"]
