"""Where the index's keys live: all under one prefix on one Redis (or on a Sentinel's
primary), or in 16 shards spread over the masters of a Redis Cluster. Pure: names only.

One Redis, and Sentinel (one primary at a time): a single shard whose keys are exactly those
listed in :mod:`.redis_index` under ``prefix``, so an index made before shards existed is
read as it is.

Redis Cluster: a transaction or a script may only touch keys of one hash slot, so

- an entry's keys, and the sets and counters kept beside it, live in its *shard*. Shard
  ``i`` holds the task hashes whose first hex digit is ``i``: the shards in order hold the
  hashes in order, and a listing reads them shard after shard. A shard's keys are
  ``{<tag>}members``, ``{<tag>}m:<hash>``, ...: Redis places every key with the same
  ``{...}`` in the same slot;
- each shard's tag is ``<prefix><i>.<n>`` with the smallest ``n`` whose slot falls in the
  shard's sixteenth of the 16384 slots, so the shards spread evenly: a cluster whose masters own
  equal ranges of slots (what ``redis-cli --cluster create`` makes) holds as many shards on
  each master, and a 100k-hash lookup asks each master for its share;
- what belongs to no entry (the events stream, the lookup counters, runs, replicas, the
  maintenance lease) lives in one slot, under ``{<prefix>}``; each content digest's lock and
  read marks in a slot of their own.

The layout is part of the data: every replica of a cache must use the same one (an index
moves between layouts by ``dask-cache reindex``, which rebuilds it from the sidecars).
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

__all__ = ["CLUSTER_SHARDS", "Keyspace", "Shard"]

#: Shards of an index in a Redis Cluster (a power of two up to 256: a hash's first byte,
#: shifted, names its shard). Sixteen spread over 3 masters as 5, 5 and 6 and allow up to
#: 16 masters; a lookup costs the server ~0.7 ms of CPU for 1k hashes (64 shards: 2.2 ms,
#: against 0.2 ms on one Redis), a command per shard it touches.
CLUSTER_SHARDS = 16
_SHIFT = (256 // CLUSTER_SHARDS).bit_length() - 1


class Shard:
    """The keys of one shard: every key under ``prefix`` (see :mod:`.redis_index`)."""

    def __init__(self, prefix: str, number: int = 0) -> None:
        self.prefix = prefix
        self.number = number
        self.members = f"{prefix}members"
        self.by_hash = f"{prefix}by_hash"
        self.access = f"{prefix}access"
        self.evict = f"{prefix}evict"
        self.pinned = f"{prefix}pinned"
        self.hits = f"{prefix}hits"
        self.expires = f"{prefix}expires"
        self.stats = f"{prefix}stats"
        self.leases = f"{prefix}leases"
        #: Written before ``WAIT``: a write of this shard's slot on the connection that
        #: waits (:mod:`.durability`).
        self.durable = f"{prefix}durable"

    def __repr__(self) -> str:
        return f"Shard({self.prefix!r}, {self.number})"

    def manifest(self, task_hash: str) -> str:
        return f"{self.prefix}m:{task_hash}"

    def label(self, label: str) -> str:
        return f"{self.prefix}label:{label}"

    def refs(self, digest: str) -> str:
        return f"{self.prefix}refs:{digest}"

    def lease_quota(self, client: str) -> str:
        """How many leases ``client`` took and did not release (docs/protocol.md, "Leases")."""
        return f"{self.prefix}lease-quota:{client}"


class Keyspace:
    """The names of one cache's keys under ``prefix``; ``sharded`` for a Redis Cluster.

    ``shards`` in hash order; :meth:`shard_of` and :meth:`group` say where hashes live
    (task hashes are 32 lowercase hex digits, as the API validates them).
    """

    def __init__(self, prefix: str, *, sharded: bool = False) -> None:
        if sharded and ("{" in prefix or "}" in prefix):
            raise ValueError(f"a Redis Cluster key prefix must not contain braces: {prefix!r}")
        self.prefix = prefix
        self.sharded = sharded
        #: A hash's first byte ``>> shift`` is its shard's number.
        self.shift = _SHIFT
        if sharded:
            self.shards = tuple(Shard("{" + _balanced_tag(prefix, i) + "}", i)
                                for i in range(CLUSTER_SHARDS))
            #: The prefix of the keys that belong to no shard (all in one slot).
            self.globals = "{" + prefix + "}"
        else:
            self.shards = (Shard(prefix),)
            self.globals = prefix

    def shard_of(self, task_hash: str) -> Shard:
        if not self.sharded:
            return self.shards[0]
        return self.shards[int(task_hash[:2], 16) >> _SHIFT]

    def group(self, hashes: Sequence[str]) -> list[tuple[Shard, list[int]]]:
        """The shards ``hashes`` fall in, in shard order, each with the positions of its
        hashes in ``hashes`` (in order)."""
        if not self.sharded:
            return [(self.shards[0], list(range(len(hashes))))]
        positions: dict[int, list[int]] = {}
        for i, task_hash in enumerate(hashes):
            positions.setdefault(int(task_hash[:2], 16) >> _SHIFT, []).append(i)
        return [(self.shards[n], positions[n]) for n in sorted(positions)]

    def digest_lock(self, digest: str) -> str:
        """The key of ``digest``'s lock (:class:`~.locks.RedisLock`)."""
        if not self.sharded:
            return f"{self.prefix}dlock:{digest}"
        return f"{{{self.prefix}dlock:{digest}}}"

    def read_marks(self, digest: str) -> str:
        """The key of ``digest``'s read marks: in its lock's slot (one script reads both)."""
        if not self.sharded:
            return f"{self.prefix}reading:{digest}"
        return f"{{{self.prefix}dlock:{digest}}}reading"


def _balanced_tag(prefix: str, number: int) -> str:
    """Shard ``number``'s tag: the first ``<prefix><number>.<n>`` whose slot is in the
    shard's share of the slots (about 64 tries on average)."""
    share = REDIS_CLUSTER_HASH_SLOTS // CLUSTER_SHARDS
    low, high = number * share, (number + 1) * share
    n = 0
    while not low <= key_slot(f"{prefix}{number}.{n}".encode()) < high:
        n += 1
    return f"{prefix}{number}.{n}"
