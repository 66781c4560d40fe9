"""The Valkey store's protocol steps, each one Lua script: atomic and fenced by construction.

A script runs alone on its node (nothing interleaves between its read and its write), reads
the server's clock (`TIME`) for every decision, and touches one record: its hash, whose name
carries the record's `pk` as a hash tag, so in cluster mode it lives on one node and the
script runs there (with the wake-up keys beside it, under the same tag). redis-py's
`register_script` sends each by its SHA (EVALSHA), loading it again on a NOSCRIPT answer.

The record is one hash. Beside the record's own fields (`FIELDS`) it keeps three the server
decides by, all in server milliseconds or derived from the claim:

    offset_ms  the claimer's clock minus the server's, measured when the claim ran (the
               script runs after the caller read its clock, so the offset errs towards a
               later server deadline: a holder never holds less than it was told)
    skew_ms    the claim's skew allowance, kept for the writes that do not pass one
    frees_at   IN_PROGRESS only: the first server millisecond another claim with the same
               allowance takes the key (one with another allowance: that much later or
               sooner, as the claim's condition on DynamoDB has it)

and the key's own expiry (PEXPIREAT). A COMPLETED record's key expires at the first server
millisecond the record counts as expired: the server deletes it then. An IN_PROGRESS claim
and a RELEASED tombstone linger `LINGER_MS` past both their expiration and their lease's
end (`keep`): "expired counts as absent" and "a lapsed lease is claimable" are the claim's
conditions on their fields, so a holder that outlived its lease and its expiry while nobody
took the key still finds its record, and its owner-fenced completion lands (as on DynamoDB,
where an expired record lingers until TTL deletion).
A caller's time T maps to the server's as T - offset_ms. Numbers are passed and written as
whole-number strings (`%.0f`): a Lua number printed as it is would read 1.8e+12.

**Reads carry the server's clock.** Every script that answers with a record (a claim, won or
refused; a refused retake, extension or operator's release; `GET`, the store's read) answers
the server's `TIME` of that read beside it. The store maps it into the clock the record was
written in (server ms + offset_ms) as `Record.read_at_ms`, so the protocol judges the
record (lapsed, released, Retry-After, the next poll) by what the server saw, whatever the
reader's own clock says.

**Wake-ups.** Beside the record, under its hash tag (one slot): `<record>:waiters`, a set of
the tokens of waiters armed on it, and `<record>:wake:<token>`, one list per waiter. `ARM`
adds a waiter's token only while the record is still the one the waiter saw, in the same
step as that check: a completion either ran before it (the check answers "changed") or
runs after it and finds the token. Completing and releasing (`wake` in the prelude) push
one element to every armed waiter's list and forget the set, in the script that writes:
each waiter then blocks on its own list (BLPOP), which keeps the element until popped, so a
wake-up sent before the waiter blocks is not lost, and every waiter wakes. Lists and sets
expire on their own: a waiter that died leaves nothing for long. A record whose hash tag is
empty (a `pk` starting with `}`: the server hashes the whole name) has no keys beside it in
its slot, and no wake-ups: its waiters poll.
"""

from __future__ import annotations

from ..record import FORMAT_VERSION

# What counts as a readable record, for the claim script (`readable` in the prelude) and the
# store's reader (`store._record`) alike: both are built from these three, so the server never
# overwrites a hash the reader would call unreadable, nor refuses one it would call free.
NUMBERS = (
    "fmt", "expiration", "lease_until", "claimed_at", "completed_at", "offset_ms", "skew_ms",
    "frees_at",
)  # fmt: skip
"""Fields that, when present, are whole numbers written as this library writes them."""
NEEDS = {
    "IN_PROGRESS": ("expiration", "lease_until", "frees_at"),
    "COMPLETED": ("expiration",),
    "RELEASED": ("expiration",),
}
"""The statuses this library writes, each with the fields it cannot be judged without."""
DIGITS = 15
"""The most digits of a number (a sign aside): exact in a Lua number (a double) and in
Python's int alike, and far past any time in milliseconds. Strict decimal, nothing else
(no `0x1`, no `1e3`, no spaces), where Lua's `tonumber` and Python's `int` would disagree."""


def _lua_names(names: tuple[str, ...]) -> str:
    return "{" + ", ".join(f"'{name}'" for name in names) + "}"


_NEEDS_LUA = ", ".join(f"{status} = {_lua_names(names)}" for status, names in NEEDS.items())
READABLE = f"""-- whether a hash is a record the store's reader can read (NUMBERS, NEEDS, DIGITS
-- of `scripts`; the reader, `store._record`, decides by the same): a claim never replaces
-- one it is not (the store then reads it and answers the typed error)
local NUMBERS = {_lua_names(NUMBERS)}
local NEEDS = {{{_NEEDS_LUA}}}
local function integer(v)
  local digits = #v - (string.sub(v, 1, 1) == '-' and 1 or 0)
  return string.find(v, '^%-?%d+$') ~= nil and digits <= {DIGITS}
end
local function readable(f)
  local needs = NEEDS[f['status'] or '']
  if not needs then return false end
  for _, name in ipairs(needs) do
    if f[name] == nil then return false end
  end
  for _, name in ipairs(NUMBERS) do
    if f[name] ~= nil and not integer(f[name]) then return false end
  end
  local fmt = tonumber(f['fmt'] or '1')
  return fmt >= 1 and fmt <= {FORMAT_VERSION}
end
"""

WAKE_KEEP_MS = 10_000
"""How long a wake-up, and a set of armed waiters, outlive their last write: longer than
any one block (the schedule's longest interval, 0.5 s), so a waiter finds its wake-up
however late it blocks; short enough that a waiter that died leaves nothing behind."""

LINGER_MS = 3_600_000
"""How long an IN_PROGRESS claim or a RELEASED tombstone stays on the server past the later
of its expiration and its lease's end: longer than any Lambda invocation (15 minutes), so a
holder still running past both, unchallenged, can complete; no longer, so a crashed
holder's record does not stay for ever. It decides nothing: the claim's conditions do."""

PRELUDE = (
    f"local WAKE_KEEP_MS = {WAKE_KEEP_MS}\n"
    + f"local LINGER_MS = {LINGER_MS}\n"
    + """local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function num(x) return string.format('%.0f', x) end
"""
    + READABLE
    + """-- wake every waiter armed on the record `key` (ARM): one element on each one's own list
-- (only where the record's hash tag is not empty: else keys beside it hash elsewhere).
-- Called after the write it follows, which a failing call would leave applied and the
-- caller told it failed: so it never fails (pcall), and a key of another type where a
-- waiters' set or a list would be is left as it is (its waiters poll)
local function wake(key)
  local open = string.find(key, '{', 1, true)
  local close = open and string.find(key, '}', open + 1, true)
  if not close or close == open + 1 then return end
  local waiters = key .. ':waiters'
  local tokens = redis.pcall('SMEMBERS', waiters)
  if type(tokens) ~= 'table' or tokens['err'] then return end
  for _, token in ipairs(tokens) do
    local list = key .. ':wake:' .. token
    local pushed = redis.pcall('RPUSH', list, '1')
    if type(pushed) == 'number' then redis.call('PEXPIRE', list, WAKE_KEEP_MS) end
  end
  if #tokens > 0 then redis.call('DEL', waiters) end
end
local function fields(flat)
  local f = {}
  for i = 1, #flat, 2 do f[flat[i]] = flat[i + 1] end
  return f
end
-- a record's expiration (caller epoch seconds) as the first server ms it counts as expired:
-- as Record.frees_at_ms has it, (expiration + 1) s past, plus the skew allowance
local function expires_at(expiration_s, offset, skew)
  return (tonumber(expiration_s) + 1) * 1000 - offset + skew
end
-- the key expiry of an IN_PROGRESS claim or a RELEASED tombstone (server ms): LINGER_MS past
-- the later of its expiry and the first ms its lease frees (frees_at, 0 for none)
local function keep(key, expires, frees)
  redis.call('PEXPIREAT', key, num(math.max(expires, frees) + LINGER_MS))
end
-- write an IN_PROGRESS claim: ARGV from `first` on are
-- owner, payload_hash ('' for none), now_ms, lease_until_ms, expiration_s, skew_ms
local function write_claim(key, now, a, first)
  local owner, hash = a[first], a[first + 1]
  local caller_now, lease_until = tonumber(a[first + 2]), tonumber(a[first + 3])
  local expiration, skew = a[first + 4], tonumber(a[first + 5])
  local offset = caller_now - now
  -- first a write that may grow memory: a full server (maxmemory, noeviction) refuses the
  -- claim here, before anything is written, as it refuses an extension; were the DEL first,
  -- the script would be let on, and a duplicate could take over a holder that cannot extend
  redis.call('HSET', key, 'status', 'IN_PROGRESS')
  redis.call('DEL', key)
  redis.call('HSET', key, 'status', 'IN_PROGRESS', 'owner', owner,
    'expiration', expiration, 'lease_until', num(lease_until), 'claimed_at', num(caller_now),
    'fmt', '1', 'offset_ms', num(offset), 'skew_ms', num(skew),
    'frees_at', num(lease_until - offset + skew + 1))
  if hash ~= '' then redis.call('HSET', key, 'payload_hash', hash) end
  keep(key, expires_at(expiration, offset, skew), lease_until - offset + skew + 1)
end
"""
)

CLAIM = (
    PRELUDE
    + """
local key, now = KEYS[1], server_ms()
local held = redis.call('HGETALL', key)
if #held > 0 then
  local f = fields(held)
  local free = false
  if not readable(f) then
    return {0, held, now}  -- not a record this library wrote: the store reads it as unreadable
  end
  local expiration = tonumber(f['expiration'])
  local offset, skew = tonumber(f['offset_ms'] or '0'), tonumber(f['skew_ms'] or '0')
  local allowed = tonumber(ARGV[6])  -- this claim's own allowance decides, as on DynamoDB
  if expires_at(expiration, offset, allowed) <= now then
    free = true  -- expired counts as absent (the key lingers past it: `keep`)
  elseif f['owner'] == ARGV[1] then
    free = false  -- our own record: a delayed copy of our claim never re-locks a key
  elseif f['status'] == 'RELEASED' then
    free = true
  elseif f['status'] == 'IN_PROGRESS' then
    free = tonumber(f['frees_at']) - skew + allowed <= now
  end
  if not free then return {0, held, now} end
end
write_claim(key, now, ARGV, 1)
return {1, held, now}
"""
)
"""claim(owner, payload_hash, now_ms, lease_until_ms, expiration_s, skew_ms) -> {won, record, now}.

Takes the key when it is free, else answers with the record that holds it, in one step: no
record, an expired one (on the server's clock, whatever its status), a RELEASED tombstone of
another claim, or an IN_PROGRESS record whose lease lapsed on the server's clock (its end
plus the skew allowance). The allowance is this claim's own (`skew_ms`), for the lease and
the expiration alike, as on DynamoDB: the claimer judged the record it waits on by it
(`Record.frees_at_ms`), so the server frees the key exactly when the claimer expects.
A COMPLETED record, a live lease and any record carrying our own owner token keep the key.
Won: {1, the record replaced (flat, empty if none), now}; refused: {0, the holder, now},
`now` the server's clock the record was read at (`read_at_ms`)."""

RETAKE = (
    PRELUDE
    + """
local key, now = KEYS[1], server_ms()
local held = redis.call('HGETALL', key)
local f = fields(held)
if f['owner'] ~= ARGV[1] or f['status'] ~= 'RELEASED' or f['lease_until'] ~= ARGV[2] then
  return {0, held, now}
end
write_claim(key, now, {ARGV[1], ARGV[3], ARGV[4], ARGV[5], ARGV[6], f['skew_ms'] or '0'}, 1)
return {1, {}}
"""
)
"""retake(owner, released_at_ms, payload_hash, now_ms, lease_until_ms, expiration_s).

A durable execution's claim over its own tombstone: only while the key holds exactly the
RELEASED record with our owner stamped `released_at_ms` (any claim since keeps the key; a
delayed copy cannot undo a later release). {1, {}} or {0, the holder, the server's now}."""

EXTEND = (
    PRELUDE
    + """
local key = KEYS[1]
local held = redis.call('HGETALL', key)
local f = fields(held)
if f['owner'] ~= ARGV[1] or f['status'] ~= 'IN_PROGRESS' then return {0, held, server_ms()} end
local offset, skew = tonumber(f['offset_ms']), tonumber(f['skew_ms'])
local lease_until = tonumber(ARGV[4])
if ARGV[6] and ARGV[6] ~= '' then
  -- asked at the holder's now (ARGV[6]) for ARGV[7] ms: on the server's clock the lease is
  -- the later of the one held and ARGV[7] from now, whatever the holder's clock did since its
  -- claim (NTP steps): a step neither shortens it (a duplicate would run beside the holder)
  -- nor stretches it (a hung holder's key held for the step's length). A clock stepped past
  -- a second gets the record's offset measured anew, for the times it sends from now on,
  -- and the claim's time moved into it, so every time of the record maps by one offset
  -- (an operator's scan dates the claim by it, a waiter the holder's age)
  local now = server_ms()
  local held = (tonumber(f['lease_until']) or 0) - offset
  local measured = tonumber(ARGV[6]) - now
  if math.abs(measured - offset) > 1000 then
    if f['claimed_at'] then
      f['claimed_at'] = num(tonumber(f['claimed_at']) + measured - offset)
      redis.call('HSET', key, 'claimed_at', f['claimed_at'])
    end
    offset = measured
    redis.call('HSET', key, 'offset_ms', num(offset))
  end
  lease_until = math.max(held, now + tonumber(ARGV[7])) + offset
end
redis.call('HSET', key, 'lease_until', num(lease_until), 'expiration', ARGV[5],
  'frees_at', num(lease_until - offset + skew + 1))
if ARGV[2] ~= '' then redis.call('HSET', key, 'payload_hash', ARGV[2]) end
-- the holder's claimed_at is on its clock at the claim: only for a record without one
if ARGV[3] ~= '' and not f['claimed_at'] then redis.call('HSET', key, 'claimed_at', ARGV[3]) end
keep(key, expires_at(ARGV[5], offset, skew), lease_until - offset + skew + 1)
return {1, {}}
"""
)
"""extend(owner, payload_hash, claimed_at_ms, lease_until_ms, expiration_s, now_ms, lease_ms).

Moves our IN_PROGRESS claim's lease (and its expiry), fenced on the owner token and the
status: a claim taken over, completed or released is not ours to extend. With `now_ms` and
`lease_ms` (the holder's clock when it asked, and the lease it asked for) the lease is the
later of the one held and `lease_ms` from the server's now, and a clock stepped more than a
second since the claim gets the record's offset measured anew, its `claimed_at` moved with
it: a step neither drops the lease nor holds the key for the step's length, and the claim
keeps its date on the server's clock. Without them, `lease_until_ms` is kept as given and
maps by the offset of the claim. `claimed_at_ms` is written only to a record without one.
{1, {}} or {0, the holder, the server's now}."""

COMPLETE = (
    PRELUDE
    + """
local key = KEYS[1]
local f = fields(redis.call('HGETALL', key))
if f['owner'] ~= ARGV[1] then return 0 end
local offset, skew = tonumber(f['offset_ms'] or '0'), tonumber(f['skew_ms'] or '0')
-- the expiration is on the completing caller's clock, read at completed_at: measured anew
-- (the claim's was another caller's, or another moment's, after an operator's release, a
-- durable execution resumed elsewhere, a clock stepped mid-call)
if ARGV[6] ~= '' then offset = tonumber(ARGV[6]) - server_ms() end
redis.call('DEL', key)
redis.call('HSET', key, 'status', 'COMPLETED', 'owner', ARGV[1], 'expiration', ARGV[3],
  'result', ARGV[4], 'fmt', '1', 'offset_ms', num(offset), 'skew_ms', num(skew))
if ARGV[2] ~= '' then redis.call('HSET', key, 'payload_hash', ARGV[2]) end
if ARGV[5] ~= '' then redis.call('HSET', key, 'claimed_at', ARGV[5]) end
if ARGV[6] ~= '' then redis.call('HSET', key, 'completed_at', ARGV[6]) end
redis.call('PEXPIREAT', key, num(expires_at(ARGV[3], offset, skew)))
wake(key)
return 1
"""
)
"""complete(owner, payload_hash, expiration_s, result, claimed_at_ms, completed_at_ms) -> 0|1.

The COMPLETED record with its result, only where the record still carries our owner token:
a claim whose lease lapsed and was taken over writes nothing (the new holder's record
stays). Over our own record in any status (an operator's forced release of a holder still
running: its effect is recorded, not run again), and the same completion sent again
writes the same record. Its expiry maps by the offset measured at the completion, from
`completed_at_ms` (the caller's clock when it computed the expiration): the claim's offset
belongs to the claimer's clock at the claim, which need not be the completing caller's, nor
its clock now. A completion sent again later measures a smaller offset, so its result lives
that much longer (the retry's delay), never shorter. Without `completed_at_ms`, the claim's."""

RELEASE = (
    PRELUDE
    + """
local key, now = KEYS[1], server_ms()
local f = fields(redis.call('HGETALL', key))
if f['owner'] ~= ARGV[1] or f['status'] ~= 'IN_PROGRESS' then return 0 end
local skew = tonumber(f['skew_ms'] or '0')
local offset = tonumber(ARGV[2]) - now
redis.call('DEL', key)
redis.call('HSET', key, 'status', 'RELEASED', 'owner', ARGV[1], 'lease_until', ARGV[2],
  'expiration', ARGV[3], 'fmt', '1', 'offset_ms', num(offset), 'skew_ms', num(skew))
keep(key, expires_at(ARGV[3], offset, skew), 0)
wake(key)
return 1
"""
)
"""release(owner, now_ms, tombstone_expiration_s) -> 0|1.

Our IN_PROGRESS claim becomes a RELEASED tombstone carrying our token, stamped `now_ms`:
free for every other claim at once, while a delayed copy of our own claim finds its own
record and is refused until the tombstone expires. Only our claim, and only in progress: a
completion that landed is never undone."""

RELEASE_VERSION = (
    PRELUDE
    + """
local key, now = KEYS[1], server_ms()
local held = redis.call('HGETALL', key)
if #held == 0 then return {0, held, now} end
local f = fields(held)
local names = {'status', 'owner', 'lease_until', 'expiration', 'claimed_at', 'completed_at'}
for i, name in ipairs(names) do
  if (f[name] or '') ~= ARGV[i] then return {0, held, now} end
end
local skew = tonumber(f['skew_ms'] or '0')
local offset = tonumber(ARGV[7]) - now
redis.call('DEL', key)
redis.call('HSET', key, 'status', 'RELEASED', 'lease_until', ARGV[7], 'expiration', ARGV[8],
  'fmt', '1', 'offset_ms', num(offset), 'skew_ms', num(skew))
if ARGV[2] ~= '' then redis.call('HSET', key, 'owner', ARGV[2]) end
keep(key, expires_at(ARGV[8], offset, skew), 0)
wake(key)
return {1, {}}
"""
)
"""release_version(status, owner, lease_until, expiration, claimed_at, completed_at, now_ms,
tombstone_expiration_s) -> {released, the holder, the server's now}.

An operator's release of exactly the version they were shown (each field '' when absent):
any write since (a completion, an extension, another claim) keeps the record. The tombstone
keeps the shown owner token, as the protocol's own release does."""

ARM = (
    PRELUDE
    + """
local key, waiters, list = KEYS[1], KEYS[2], KEYS[3]
local f = fields(redis.call('HGETALL', key))
if (f['status'] or '') ~= ARGV[1] or (f['owner'] or '') ~= ARGV[2]
    or (f['lease_until'] or '') ~= ARGV[3] then
  return 0
end
redis.call('DEL', list)
redis.call('SADD', waiters, ARGV[4])
if redis.call('PTTL', waiters) < tonumber(ARGV[5]) then
  redis.call('PEXPIRE', waiters, ARGV[5])
end
return 1
"""
)
"""arm(status, owner, lease_until, token, keep_ms) -> 1 armed | 0 changed.

KEYS: the record, its waiters' set, this waiter's list. Arms the waiter only while the
record still has the status, owner and lease the waiter saw (each '' when absent): else
it has changed already, and the waiter re-reads it instead of blocking. A wake-up left on
the list from an earlier arm is dropped: the check just made supersedes it."""

GET = (
    PRELUDE
    + """
return {redis.call('HGETALL', KEYS[1]), server_ms()}
"""
)
"""get() -> {the record (flat, empty if none), now}: a read with the server's clock at it, so
the reader judges the record by the server's time (`Record.read_at_ms`), not its own."""

ALL = {
    "get": GET,
    "claim": CLAIM,
    "retake": RETAKE,
    "extend": EXTEND,
    "complete": COMPLETE,
    "release": RELEASE,
    "release_version": RELEASE_VERSION,
    "arm": ARM,
}
