"""What RESULT_CACHE_REDIS_URL may say (cache_server/index/client.py) and where the keys of
each kind of Redis live (cache_server/index/keyspace.py): pure, no Redis."""

from __future__ import annotations

import pytest
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from cache_server.index.client import parse_redis_url
from cache_server.index.keyspace import CLUSTER_SHARDS, Keyspace
from cache_server.settings import Settings
from tests.server.wire import new_hash


def test_sentinel_urls_name_the_sentinels_the_master_and_credentials() -> None:
    target = parse_redis_url("redis+sentinel://:pw@h1:26379,h2:26380,h3/mymaster/2")
    assert target.kind == "sentinel" and target.master == "mymaster"
    assert target.hosts == (("h1", 26379), ("h2", 26380), ("h3", 26379))
    assert target.options["password"] == "pw" and target.options["db"] == 2
    assert not target.tls and target.sentinel_options == {}
    tls = parse_redis_url("rediss+sentinel://u:p@h1:1/m?sentinel_password=sp"
                          "&ssl_cert_reqs=none&socket_timeout=2")
    assert tls.tls and tls.sentinel_options == {"password": "sp"}
    assert (tls.options["username"], tls.options["ssl_cert_reqs"]) == ("u", "none")
    assert tls.options["socket_timeout"] == 2.0  # the URL's own timeout wins


def test_cluster_urls_list_seed_nodes() -> None:
    target = parse_redis_url("redis+cluster://:secret@a:7000,b:7001,[::1]:7002")
    assert target.kind == "cluster" and target.master is None
    assert target.hosts == (("a", 7000), ("b", 7001), ("::1", 7002))
    assert target.options["password"] == "secret" and "db" not in target.options
    assert parse_redis_url("redis://localhost:6379/0").kind == "redis"
    assert parse_redis_url("unix:///tmp/redis.sock").kind == "redis"


@pytest.mark.parametrize(("url", "message"), [
    ("redis+sentinel://h1:1", "names no master"),
    ("redis+cluster://a:1/3", "only database 0"),
    ("redis+cluster://:secret@/x", "names no host"),
    ("redis+cluster://a:port", "is not host:port"),
    ("redis+nope://a:1", "not a Redis URL"),
    ("http://a:1", "not a Redis URL"),
])
def test_bad_urls_are_refused_with_the_reason_and_no_password(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        parse_redis_url(url)
    assert "secret" not in str(caught.value)
    with pytest.raises(ValueError, match=message) as caught:
        Settings(redis_url=url)
    assert "secret" not in str(caught.value)  # pydantic shows no input either


def test_a_cluster_prefix_may_not_hold_braces() -> None:
    with pytest.raises(ValueError, match="braces"):
        Settings(redis_url="redis+cluster://a:1", redis_prefix="{rc}:")
    assert Settings(redis_url="redis://a:1", redis_prefix="{rc}:").redis_prefix == "{rc}:"


def test_one_redis_keeps_the_keys_of_old() -> None:
    keys = Keyspace("rc:")
    (shard,) = keys.shards
    h = new_hash()
    assert keys.shard_of(h) is shard and keys.globals == "rc:"
    assert (shard.members, shard.manifest(h), shard.refs("d"), shard.stats) == (
        "rc:members", f"rc:m:{h}", "rc:refs:d", "rc:stats")
    assert (keys.digest_lock("d"), keys.read_marks("d")) == ("rc:dlock:d", "rc:reading:d")


def test_cluster_shards_hold_hashes_in_order_and_spread_over_the_slots() -> None:
    keys = Keyspace("rc:", sharded=True)
    assert len(keys.shards) == CLUSTER_SHARDS
    share = REDIS_CLUSTER_HASH_SLOTS // CLUSTER_SHARDS
    for shard in keys.shards:  # every key of a shard in one slot, a slot of its own share
        slots = {key_slot(k.encode()) for k in (shard.members, shard.manifest(new_hash()),
                                                shard.refs("d"), shard.leases, shard.stats)}
        (slot,) = slots
        assert shard.number * share <= slot < (shard.number + 1) * share
    hashes = sorted(new_hash() for _ in range(2000))
    numbers = [keys.shard_of(h).number for h in hashes]
    assert numbers == sorted(numbers)  # shards in order hold the hashes in order
    groups = keys.group(hashes)
    assert [s.number for s, _ in groups] == sorted({s.number for s, _ in groups})
    assert sorted(i for _, positions in groups for i in positions) == list(range(2000))
    assert key_slot(keys.digest_lock("d").encode()) == key_slot(keys.read_marks("d").encode())
    assert len({key_slot(f"{keys.globals}{name}".encode())
                for name in ("events", "stats", "runs", "run:x")}) == 1
