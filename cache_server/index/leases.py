"""Leases: which run is computing a task hash right now (docs/protocol.md, "Leases").

One Redis string per leased hash, ``<prefix>lease:<hash>`` = ``<holder>`` or
``<holder> <estimate seconds>``, with a TTL (``SET NX PX``). Each operation over a batch
of hashes is one Lua script, so a 100k-hash lease costs one round trip and no hash is
half-leased. A holder may re-lease or renew its own leases (idempotent); only the holder
releases them; storing the hash drops its lease whoever holds it (:meth:`drop`), since
waiters can then load the result. A stored entry (``members``) that expired (``expires``)
counts as not stored. Lua scripts name their keys in ``KEYS``, as Redis asks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

__all__ = ["LeaseStatus", "LeaseStore"]

# A stored entry is a member of KEYS[1] whose expiry in KEYS[2] (if any) is after ARGV[3].
_STORED = """
local function stored(h)
  if redis.call('SISMEMBER', KEYS[1], h) == 0 then return false end
  local expires = redis.call('ZSCORE', KEYS[2], h)
  return not expires or tonumber(expires) > tonumber(ARGV[3])
end
"""

# KEYS: members set, expiry zset, then one lease key per hash. ARGV: holder, ttl ms, now,
# then per hash (in KEYS order) the hash itself. Answers one digit per hash: 0 granted
# (new or already this holder's: renewed), 1 stored, 2 leased by another holder.
# The common case (a hash nobody stores or leases) costs one call, SET NX, and a share of
# one SMISMEMBER per 4000 hashes; the expiry and the holder are read only where they can
# matter.
_ACQUIRE = _STORED + """
local holder, ttl = ARGV[1], ARGV[2]
local out = {}
local n = #KEYS - 2
for first = 1, n, 4000 do  -- membership in chunks (unpack is bounded by Lua's stack)
  local last = math.min(first + 3999, n)
  local member = redis.call('SMISMEMBER', KEYS[1], unpack(ARGV, first + 3, last + 3))
  for j = first, last do
    local i = j + 2
    if member[j - first + 1] == 1 and stored(ARGV[i + 1]) then
      out[j] = '1'
    elseif redis.call('SET', KEYS[i], holder, 'NX', 'PX', ttl) then
      out[j] = '0'
    else
      local v = redis.call('GET', KEYS[i])
      if not v then  -- expired between the two calls
        redis.call('SET', KEYS[i], holder, 'PX', ttl)
        out[j] = '0'
      elseif v == holder or string.sub(v, 1, #holder + 1) == holder .. ' ' then
        redis.call('PEXPIRE', KEYS[i], ttl)
        out[j] = '0'
      else
        out[j] = '2'
      end
    end
  end
end
return table.concat(out)
"""

# KEYS: members set, expiry zset, lease keys. ARGV: holder, ttl ms, now, then per hash
# its hash and its estimate ('' if unknown). One digit per hash: 1 renewed (or re-taken:
# it had expired and nobody took it), 0 lost (stored, or another holder's).
_RENEW = _STORED + """
local holder, ttl = ARGV[1], ARGV[2]
local out = {}
for i = 3, #KEYS do
  local h, estimate = ARGV[2 * i - 2], ARGV[2 * i - 1]
  local value = holder
  if estimate ~= '' then value = holder .. ' ' .. estimate end
  local v = redis.call('GET', KEYS[i])
  if stored(h) then
    out[#out + 1] = '0'
  elseif not v or v == holder or string.sub(v, 1, #holder + 1) == holder .. ' ' then
    redis.call('SET', KEYS[i], value, 'PX', ttl)
    out[#out + 1] = '1'
  else
    out[#out + 1] = '0'
  end
end
return table.concat(out)
"""

# KEYS: lease keys. ARGV: holder. Deletes those the holder holds; answers how many.
_RELEASE = """
local holder, n = ARGV[1], 0
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v and (v == holder or string.sub(v, 1, #holder + 1) == holder .. ' ') then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n
"""


@dataclass(frozen=True)
class LeaseStatus:
    leased: bool
    ttl: float | None  # seconds left
    estimate: float | None  # the holder's estimate of the task's compute time


class LeaseStore:
    """Leases in the index's Redis under ``prefix``. Coroutine safe; many servers may share
    one Redis (every operation is one atomic script)."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self._members = f"{prefix}members"
        self._expires = f"{prefix}expires"
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)

    def key(self, task_hash: str) -> str:
        return f"{self.prefix}lease:{task_hash}"

    async def acquire(self, hashes: Sequence[str], holder: str,
                      ttl: float) -> tuple[list[str], list[str], list[str]]:
        """(granted, stored, held by another), each in request order."""
        if not hashes:
            return [], [], []
        keys = [self._members, self._expires, *(self.key(h) for h in hashes)]
        answer = str(await self._acquire(keys=keys,
                                         args=[holder, _ms(ttl), repr(time.time()), *hashes]))
        out: tuple[list[str], list[str], list[str]] = ([], [], [])
        for task_hash, flag in zip(hashes, answer, strict=True):
            out[int(flag)].append(task_hash)
        return out

    async def renew(self, hashes: Sequence[str], holder: str, ttl: float,
                    estimates: dict[str, float]) -> tuple[list[str], list[str]]:
        """(renewed, lost), each in request order."""
        if not hashes:
            return [], []
        args: list[str] = [holder, _ms(ttl), repr(time.time())]
        for task_hash in hashes:
            estimate = estimates.get(task_hash)
            args += [task_hash, "" if estimate is None else repr(float(estimate))]
        keys = [self._members, self._expires, *(self.key(h) for h in hashes)]
        answer = str(await self._renew(keys=keys, args=args))
        renewed = [h for h, flag in zip(hashes, answer, strict=True) if flag == "1"]
        lost = [h for h, flag in zip(hashes, answer, strict=True) if flag == "0"]
        return renewed, lost

    async def release(self, hashes: Sequence[str], holder: str) -> int:
        if not hashes:
            return 0
        return int(await self._release(keys=[self.key(h) for h in hashes], args=[holder]))

    async def status(self, task_hash: str) -> LeaseStatus:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(self.key(task_hash))
            pipe.pttl(self.key(task_hash))
            value, pttl = await pipe.execute()
        if value is None:
            return LeaseStatus(False, None, None)
        _, _, estimate = str(value).partition(" ")
        return LeaseStatus(True, max(int(pttl), 0) / 1000, float(estimate) if estimate else None)

    async def drop(self, *task_hashes: str) -> None:
        """Forget the leases of hashes that are now stored (whoever held them)."""
        if task_hashes:
            await self.redis.delete(*(self.key(h) for h in task_hashes))


def _ms(seconds: float) -> str:
    return str(max(int(seconds * 1000), 1))
