"""Leases: which run is computing a task hash right now (docs/protocol.md, "Leases").

All leases of a cache are fields of one Redis hash, ``<prefix>leases`` (in a Redis Cluster,
one per shard, beside the shard's entries: :mod:`.keyspace`): field ``<hash>``,
value ``<deadline ms> <holder>`` or ``<deadline ms> <holder> <estimate seconds>``. A field
whose deadline (Redis's clock, ``TIME``) has passed is free: every script treats it as
absent, and :meth:`LeaseStore.sweep` deletes such fields (the server runs it under the
maintenance lease, so the hash holds only live leases and those that expired since the last
sweep). One hash instead of a key with a TTL per lease: a 100k-hash lease is one ``HMGET``
and one ``HSET`` per chunk, not 100k ``SET NX PX`` (each a new key and a new expiry, ~8 µs).

Each operation over a batch of hashes is one Lua script, so a 100k-hash lease costs one
round trip and no hash is half-leased. A holder may re-lease or renew its own leases
(idempotent); only the holder releases them; storing the hash drops its lease whoever holds
it (:meth:`drop`), since waiters can then load the result. A stored entry (``members``) that
expired (``expires``) counts as not stored. Lua scripts name their keys in ``KEYS``, as
Redis asks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cache_server.index.keyspace import Shard
from cache_server.index.topology import Topology

__all__ = ["LeaseBound", "LeaseStatus", "LeaseStore"]

# Shared by the scripts. Lease values are split into their deadline and the rest (holder,
# estimate); ``owner(holder)`` tests whether such a rest is the holder's. ``stored``
# answers, for a chunk of hashes, which are stored entries: members of KEYS[1] whose expiry
# in KEYS[2], if any, is after ARGV[3] (expiries are read only for members, and only when
# some entry has one).
# Chunks: Lua's unpack() is bounded by its stack (8000), and HSET takes two per field.
_COMMON = """
local CHUNK = 2000
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function split(v)
  local space = string.find(v, ' ', 1, true)
  return tonumber(string.sub(v, 1, space - 1)), string.sub(v, space + 1)
end
local function owner(holder)  -- a test of a value's rest: does holder hold it?
  local prefix = holder .. ' '
  return function(rest) return rest == holder or string.sub(rest, 1, #prefix) == prefix end
end
local function stored(hashes)
  local member = redis.call('SMISMEMBER', KEYS[1], unpack(hashes))
  if redis.call('ZCARD', KEYS[2]) == 0 then return member end
  local candidates, at = {}, {}
  for k = 1, #hashes do
    if member[k] == 1 then
      candidates[#candidates + 1] = hashes[k]
      at[#at + 1] = k
    end
  end
  if #candidates == 0 then return member end
  local expires = redis.call('ZMSCORE', KEYS[2], unpack(candidates))
  for i = 1, #candidates do
    if expires[i] and tonumber(expires[i]) <= tonumber(ARGV[3]) then member[at[i]] = 0 end
  end
  return member
end
"""

# KEYS: members set, expiry zset, leases hash, the client's quota counter. ARGV: holder,
# ttl ms, now, the most lease fields in all, the client's quota, then the hashes (each
# once). Answers one digit per hash: 0 granted (new, expired, or already this holder's:
# renewed, its estimate kept), 1 stored, 2 leased by another holder; or, granting nothing,
# 'T' if the leases hash could pass its bound or 'C' the client's quota (both checked
# against the request's size first: no hash is half-leased). The quota counter counts
# the leases the client took and did not release, and lives as long as a lease (ttl): a
# stored hash's lease ends without a release, so it counts until then. The common case (a
# hash nobody stores or leases) costs its share of one SMISMEMBER, one HMGET and one HSET
# per chunk.
_ACQUIRE = _COMMON + """
local holder, owns = ARGV[1], owner(ARGV[1])
local n = #ARGV - 5
if redis.call('HLEN', KEYS[3]) + n > tonumber(ARGV[4]) then return 'T' end
local taken = tonumber(redis.call('GET', KEYS[4]) or '0')
if taken + n > tonumber(ARGV[5]) then return 'C' end
local now = now_ms()
local deadline = string.format('%.0f', now + tonumber(ARGV[2]))
local fresh = deadline .. ' ' .. holder
local out, new = {}, 0
for first = 1, n, CHUNK do
  local hashes = {unpack(ARGV, first + 5, math.min(first + CHUNK - 1, n) + 5)}
  local member = stored(hashes)
  local current = redis.call('HMGET', KEYS[3], unpack(hashes))
  local set = {}
  for k = 1, #hashes do
    local value = fresh
    if member[k] == 1 then
      value = nil
      out[first + k - 1] = '1'
    elseif current[k] then
      local until_ms, rest = split(current[k])
      if until_ms > now then
        if owns(rest) then value = deadline .. ' ' .. rest else value = nil end
      else
        new = new + 1
      end
      out[first + k - 1] = value and '0' or '2'
    else
      new = new + 1
      out[first + k - 1] = '0'
    end
    if value then
      set[#set + 1] = hashes[k]
      set[#set + 1] = value
    end
  end
  if #set > 0 then redis.call('HSET', KEYS[3], unpack(set)) end
end
if new > 0 then
  redis.call('INCRBY', KEYS[4], new)
  if redis.call('PTTL', KEYS[4]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[4], ARGV[2])
  end
end
return table.concat(out)
"""

# KEYS: members set, expiry zset, leases hash, the client's quota counter. ARGV: holder,
# ttl ms, now, the most lease fields in all, then per hash its hash and its estimate (''
# if unknown). One digit per hash: 1 renewed (or re-taken: it had expired and nobody took
# it; a field swept meanwhile only while the hash is within its bound), 0 lost (stored, or
# another holder's). The quota counter lives as long as the renewed leases, and counts them at
# least (renewing is no way around the quota).
_RENEW = _COMMON + """
local holder, owns = ARGV[1], owner(ARGV[1])
local now = now_ms()
local deadline = string.format('%.0f', now + tonumber(ARGV[2]))
local out, n, renewed = {}, (#ARGV - 4) / 2, 0
local room = tonumber(ARGV[4]) - redis.call('HLEN', KEYS[3])
for first = 1, n, CHUNK do
  local hashes = {}
  for j = first, math.min(first + CHUNK - 1, n) do hashes[#hashes + 1] = ARGV[2 * j + 3] end
  local member = stored(hashes)
  local current = redis.call('HMGET', KEYS[3], unpack(hashes))
  local set = {}
  for k = 1, #hashes do
    local free = member[k] == 0 and not current[k] and room > 0
    if free then room = room - 1 end  -- a new field: only within the bound
    if member[k] == 0 and current[k] then
      local until_ms, rest = split(current[k])
      free = until_ms <= now or owns(rest)
    end
    if free then
      local value = deadline .. ' ' .. holder
      local estimate = ARGV[2 * (first + k - 1) + 4]
      if estimate ~= '' then value = value .. ' ' .. estimate end
      set[#set + 1] = hashes[k]
      set[#set + 1] = value
      renewed = renewed + 1
    end
    out[first + k - 1] = free and '1' or '0'
  end
  if #set > 0 then redis.call('HSET', KEYS[3], unpack(set)) end
end
if renewed > 0 then
  local taken = tonumber(redis.call('GET', KEYS[4]) or '0')
  if taken < renewed then redis.call('SET', KEYS[4], renewed, 'PX', ARGV[2])
  elseif redis.call('PTTL', KEYS[4]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[4], ARGV[2])
  end
end
return table.concat(out)
"""

# KEYS: leases hash, the releasing client's quota counter. ARGV: holder, then the hashes
# (each once). Deletes the holder's leases (and gives them back to the client's quota);
# answers how many had not expired.
_RELEASE = _COMMON + """
local owns = owner(ARGV[1])
local now = now_ms()
local released, n = 0, #ARGV - 1
for first = 1, n, CHUNK do
  local hashes = {unpack(ARGV, first + 1, math.min(first + CHUNK - 1, n) + 1)}
  local current = redis.call('HMGET', KEYS[1], unpack(hashes))
  local gone = {}
  for k = 1, #hashes do
    if current[k] then
      local until_ms, rest = split(current[k])
      if owns(rest) then
        gone[#gone + 1] = hashes[k]
        if until_ms > now then released = released + 1 end
      end
    end
  end
  if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
end
local taken = tonumber(redis.call('GET', KEYS[2]) or '0')
if taken > 0 then
  if released >= taken then redis.call('DEL', KEYS[2])
  else redis.call('DECRBY', KEYS[2], released) end
end
return released
"""

# KEYS: leases hash. ARGV: cursor, count. Deletes the expired leases of one HSCAN page;
# answers {next cursor, how many were deleted}.
_SWEEP = _COMMON + """
local now = now_ms()
local page = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
local fields, gone = page[2], {}
for i = 1, #fields, 2 do
  if split(fields[i + 1]) <= now then gone[#gone + 1] = fields[i] end
end
for first = 1, #gone, CHUNK do
  redis.call('HDEL', KEYS[1], unpack(gone, first, math.min(first + CHUNK - 1, #gone)))
end
return {page[1], #gone}
"""

# KEYS: leases hash. ARGV: the hash. Answers {its lease or nil, Redis's TIME}: a lease's
# deadline is Redis's clock, read on the node that holds it.
_STATUS = """
local t = redis.call('TIME')
return {redis.call('HGET', KEYS[1], ARGV[1]), t[1], t[2]}
"""

#: Fields per sweep call: each call is short, so leasing is never held up behind a sweep.
_SWEEP_PAGE = 1000


class LeaseBound(Exception):
    """A lease request that would pass a bound: ``which`` is ``"total"`` (the leases hash)
    or ``"client"`` (the requesting client's quota). Nothing was leased."""

    def __init__(self, which: str, limit: int) -> None:
        super().__init__(which, limit)
        self.which = which
        self.limit = limit


@dataclass(frozen=True)
class LeaseStatus:
    leased: bool
    ttl: float | None  # seconds left
    estimate: float | None  # the holder's estimate of the task's compute time


class LeaseStore:
    """Leases in the index's Redis (in a Cluster, each shard's leases beside its entries,
    one script per shard). Coroutine safe; many servers may share one Redis (every
    operation is one atomic script per shard)."""

    def __init__(self, topology: Topology, max_leases: int = 1_000_000,
                 max_client_leases: int = 200_000) -> None:
        self.topology = topology
        self.keys = topology.keys
        # Per shard (a Cluster spreads hashes evenly over its shards).
        shards = len(self.keys.shards)
        self.max_leases = max_leases
        self.max_client_leases = max_client_leases
        self._shard_max = -(-max_leases // shards)
        self._shard_client_max = -(-max_client_leases // shards)
        redis = topology.redis
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self._sweep = redis.register_script(_SWEEP)
        self._status = redis.register_script(_STATUS)

    @staticmethod
    def _keys(shard: Shard, client: str) -> list[str]:
        return [shard.members, shard.expires, shard.leases, shard.lease_quota(client)]

    async def _per_shard(self, hashes: Sequence[str], call: Callable[[Shard, list[str]],
                         Awaitable[Any]]) -> list[tuple[list[str], Any]]:
        """``call(shard, its hashes)`` for every shard ``hashes`` fall in, all at once:
        (its hashes, its answer) in shard order."""
        if not self.keys.sharded:
            return [(list(hashes), await call(self.keys.shards[0], list(hashes)))]
        groups = [(shard, [hashes[i] for i in positions])
                  for shard, positions in self.keys.group(hashes)]
        answers = await asyncio.gather(*(call(shard, part) for shard, part in groups))
        return [(part, answer) for (_, part), answer in zip(groups, answers, strict=True)]

    async def acquire(self, hashes: Sequence[str], holder: str, ttl: float,
                      client: str = "") -> tuple[list[str], list[str], list[str]]:
        """(granted, stored, held by another), each in request order. ``hashes``: distinct
        (the service makes sure). ``client``: whose quota the new leases count in (a
        short key-safe name). :class:`LeaseBound` when the request could pass the leases'
        bound or the client's quota (then nothing is leased: in a Cluster, what other
        shards granted is released again)."""
        out: dict[str, list[str]] = {"0": [], "1": [], "2": []}
        for task_hash, flag in zip(hashes, await self.acquire_flags(hashes, holder, ttl,
                                                                    client), strict=True):
            out[flag].append(task_hash)
        return out["0"], out["1"], out["2"]

    async def acquire_flags(self, hashes: Sequence[str], holder: str, ttl: float,
                            client: str = "") -> str:
        """:meth:`acquire`'s answer as one digit per hash, in request order: ``0`` granted,
        ``1`` stored, ``2`` held by another. A hash sent twice answers twice (its second
        time as the holder's own lease). :class:`LeaseBound` as :meth:`acquire`."""
        if not hashes:
            return ""
        head = [holder, _ms(ttl), repr(time.time()), str(self._shard_max),
                str(self._shard_client_max)]
        answers = await self._per_shard(hashes, lambda shard, part: self._acquire(
            keys=self._keys(shard, client), args=[*head, *part]))
        refused = [_text(a) for _, a in answers if _text(a) in ("T", "C")]
        if refused:
            # In a Cluster other shards may have granted their part: give it back, so a
            # refused request leases nothing anywhere.
            granted = dict.fromkeys(
                h for part, answer in answers if _text(answer) not in ("T", "C")
                for h, flag in zip(part, _text(answer), strict=True) if flag == "0")
            await self.release(list(granted), holder, client)
            if "T" in refused:
                raise LeaseBound("total", self.max_leases)
            raise LeaseBound("client", self.max_client_leases)
        if len(answers) == 1:
            return _text(answers[0][1])
        return "".join(flag for _, flag in _in_order(hashes, answers))

    async def renew(self, hashes: Sequence[str], holder: str, ttl: float,
                    estimates: dict[str, float], client: str = ""
                    ) -> tuple[list[str], list[str]]:
        """(renewed, lost), each in request order."""
        if not hashes:
            return [], []
        head = [holder, _ms(ttl), repr(time.time()), str(self._shard_max)]

        def args(part: list[str]) -> list[str]:
            out = list(head)
            for task_hash in part:
                estimate = estimates.get(task_hash)
                out += [task_hash, "" if estimate is None else repr(float(estimate))]
            return out

        answers = await self._per_shard(hashes, lambda shard, part: self._renew(
            keys=self._keys(shard, client), args=args(part)))
        flags = list(_in_order(hashes, answers))
        renewed = [h for h, flag in flags if flag == "1"]
        lost = [h for h, flag in flags if flag == "0"]
        return renewed, lost

    async def release(self, hashes: Sequence[str], holder: str, client: str = "") -> int:
        if not hashes:
            return 0
        answers = await self._per_shard(hashes, lambda shard, part: self._release(
            keys=[shard.leases, shard.lease_quota(client)], args=[holder, *part]))
        return sum(int(answer) for _, answer in answers)

    async def status(self, task_hash: str) -> LeaseStatus:
        shard = self.keys.shard_of(task_hash)
        value, seconds, micros = await self._status(keys=[shard.leases], args=[task_hash])
        if value is None:
            return LeaseStatus(False, None, None)
        deadline, _, rest = str(value).partition(" ")
        left = (int(deadline) - (int(seconds) * 1000 + int(micros) // 1000)) / 1000
        if left <= 0:
            return LeaseStatus(False, None, None)  # expired: free, not swept yet
        _, _, estimate = rest.partition(" ")
        return LeaseStatus(True, left, float(estimate) if estimate else None)

    async def drop(self, *task_hashes: str) -> None:
        """Forget the leases of hashes that are now stored (whoever held them)."""
        if task_hashes:
            await self.topology.per_shard(
                [(shard, lambda pipe, shard=shard, positions=positions: pipe.hdel(
                    shard.leases, *(task_hashes[i] for i in positions)))
                 for shard, positions in self.keys.group(task_hashes)])

    async def recorded(self) -> list[str]:
        """Every hash with a lease field: live, or expired and not swept yet (for tests and
        diagnostics: it reads every shard's whole hash)."""
        answers = await self.topology.per_shard(
            [(shard, lambda pipe, shard=shard: pipe.hkeys(shard.leases))
             for shard in self.keys.shards])
        return [str(h) for (part,) in answers for h in part]

    async def sweep(self) -> int:
        """Delete every expired lease (one short script per page of each shard's hash);
        answers how many. Leases taken meanwhile are untouched: each page is checked
        atomically."""
        removed = 0
        for shard in self.keys.shards:
            cursor = "0"
            while True:
                cursor, gone = await self._sweep(keys=[shard.leases],
                                                 args=[cursor, _SWEEP_PAGE])
                removed += int(gone)
                if str(cursor) == "0":
                    break
        return removed


def _in_order(hashes: Sequence[str], answers: list[tuple[list[str], Any]]
              ) -> Iterable[tuple[str, str]]:
    """(hash, its digit) in request order, from the shards' answers (one digit per hash)."""
    if len(answers) == 1:
        part, answer = answers[0]
        return zip(part, _text(answer), strict=True)
    flags = {h: flag for part, answer in answers
             for h, flag in zip(part, _text(answer), strict=True)}
    return ((h, flags[h]) for h in hashes)


def _text(answer: Any) -> str:
    return answer.decode("ascii") if isinstance(answer, bytes) else str(answer)


def _ms(seconds: float) -> str:
    return str(max(int(seconds * 1000), 1))
