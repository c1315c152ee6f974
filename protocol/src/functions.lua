#!lua name=fencedlock
-- fencedlock without the module: the FENCEDLOCK.* commands as a Redis Functions library, for
-- servers that cannot load modules (managed services). Same arguments, replies and error texts:
--
--   FCALL fencedlock_acquire 2 key floor token ttl_ms [LABEL l] [PERMITS n] [BLOCK ms]
--                            (3 key floor wake …: a waiter, see below)
--   FCALL fencedlock_renew   2 key floor token ttl_ms
--   FCALL fencedlock_release 3 key floor wake token
--   FCALL fencedlock_raise   2 key floor token fence
--   FCALL fencedlock_cad     1 key value
--   FCALL fencedlock_status  1 key
--   FCALL fencedlock_version 0
--
-- `floor` is the floor key of the key's cluster slot (fencedlock_protocol::functions::
-- floor_key): it keeps the slot's highest fence, so a lock key that is deleted, evicted or
-- cleaned up never lets a fence repeat. With the floor, an idle lock key expires RETENTION_MS
-- after its lease ended. Without it (numkeys 1, e.g. typed in redis-cli) fences rise only
-- while the key lives, and the key is never expired by the library.
--
-- `wake` (fencedlock_protocol::functions::wake_key) is the key's wake-up list: waiters BLPOP
-- on it between attempts, so the server wakes the longest-blocked one instead of everyone
-- polling. A waiter's ACQUIRE names it: its refusal records (`wake_until`) that releases
-- until the refusing leases end must wake someone; such a release pushes one element per
-- freed permit (at most `permits` kept, for WAKE_TTL_MS). Release always names it.
--
-- Leases run on the server's wall clock (TIME): a script has no monotonic clock. BLOCK is
-- checked and then ignored: a script cannot block, so a busy key is one refused attempt (nil),
-- as the module does inside MULTI and scripts; the client does the waiting (on `wake`).
--
-- Numbers in Lua are doubles: fences stay at or below MAX_SAFE_FENCE (2^53 - 1) to be exact.
-- The error texts below are the protocol crate's (a Rust test checks every one of them).

local VERSION = 4

local MAX_TOKEN_LEN = 512
local MAX_LABEL_LEN = 256
local MAX_PERMITS = 1024
local MAX_TTL_MS = 86400000
local MAX_BLOCK_MS = 4398046511104
local MAX_FENCE = 9223372036854775807
local MAX_SAFE_FENCE = 9007199254740991
local RETENTION_MS = 600000
local FENCES_PER_MS = 1024
local EPOCH_GAP = 4294967296
local FLOOR_PREFIX = 'fencedlock:fn-floor:{'
local WAKE_PREFIX = 'fencedlock:fn-wake:{'
local WAKE_TTL_MS = 10000
-- The `kind` field of every lock key the library writes: a hash of an application's that
-- happens to have `fence` or `holders` fields is WRONGTYPE, as any other value is.
local KIND = 'fencedlock'

local E_BAD_TTL = 'ERR ttl must be a positive integer number of milliseconds'
local E_TTL_TOO_LARGE = 'ERR ttl exceeds fencedlock.max-ttl-ms (86400000)'
local E_BAD_TOKEN = 'ERR token must be 1 to 512 bytes'
local E_BAD_FENCE = 'ERR fence must be an integer from 1 to 9223372036854775807'
local E_BAD_TIMEOUT = 'ERR timeout must be an integer number of milliseconds from 0 (no limit) to 4398046511104'
local E_BAD_LABEL = 'ERR label must be 1 to 256 bytes (it is public: STATUS shows it)'
local E_BAD_PERMITS = 'ERR permits must be an integer from 1 to 1024'
local E_SYNTAX = 'ERR syntax error: the options are BLOCK timeout_ms, LABEL label and PERMITS n, each at most once'
local E_PERMITS_MISMATCH = {'ERR permits mismatch: the key is held with PERMITS ', '; ask with the same count (it changes only while nobody holds the key)'}
local E_FENCES_EXHAUSTED = 'ERR fence space exhausted: no fence above 9223372036854775807 can be issued'
local E_WRONG_TYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local E_SCRIPT_FUNCTION = 'ERR fencedlock: as a script, the first argument names the function (fencedlock_acquire, _renew, _release, _raise, _cad, _status or _version)'
local E_KEYS = 'ERR fencedlock: pass the lock key and, optionally, the floor key of its slot (fencedlock:fn-floor:{tag}) and its wake-up list (fencedlock:fn-wake:{tag}:key) as the keys'

local function fail(text)
  return redis.error_reply(text)
end

-- The server's own arity error, as the module's commands get it.
local function arity(command)
  return fail("ERR wrong number of arguments for '" .. string.upper(command) .. "' command")
end

-- A strict unsigned decimal as the module reads one: 1 to 20 ASCII digits, no sign, no
-- spaces, within 64 bits; nil otherwise. Values above 2^53 are approximate, which only bounds
-- checks see.
local function parse_u64(s)
  if #s == 0 or #s > 20 or not string.find(s, '^%d+$') then
    return nil
  end
  if #s == 20 and s > '18446744073709551615' then
    return nil
  end
  return tonumber(s)
end

local function check_token(token)
  return #token >= 1 and #token <= MAX_TOKEN_LEN
end

-- A ttl in ms, or the error reply.
local function parse_ttl(s)
  local ms = parse_u64(s)
  if ms == nil or ms == 0 then
    return nil, E_BAD_TTL
  end
  if ms > MAX_TTL_MS then
    return nil, E_TTL_TOO_LARGE
  end
  return ms
end

-- Integers as Redis arguments: Lua's own tostring would write large ones with an exponent.
local function int(n)
  return string.format('%.0f', n)
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function starts(s, prefix)
  return s ~= nil and string.sub(s, 1, #prefix) == prefix
end

-- The lock key, its floor and its wake-up list (each when given): the error reply as the
-- fourth value when the keys are wrong.
local function keys_of(keys)
  local floor, wake = keys[2], keys[3]
  if #keys < 1 or #keys > 3 or (floor ~= nil and not starts(floor, FLOOR_PREFIX))
    or (wake ~= nil and not starts(wake, WAKE_PREFIX)) then
    return nil, nil, nil, E_KEYS
  end
  return keys[1], floor, wake
end

-- The lock key's state: { fence, permits, holders = { {fence, token, deadline_us, label or
-- false}, ... } } in grant order (expired holders included until the next grant); nil for a
-- missing key; nil and the error reply for a key that is not a lock.
local function load(key)
  local got = redis.pcall('HMGET', key, 'kind', 'fence', 'permits', 'holders', 'wake_until')
  if type(got) == 'table' and got.err then
    return nil, E_WRONG_TYPE
  end
  if not got[1] and not got[2] and not got[3] and not got[4] then
    if redis.call('EXISTS', key) == 1 then
      return nil, E_WRONG_TYPE
    end
    return nil
  end
  -- Version 1 wrote no `kind`: its keys are known by their state alone.
  if got[1] and got[1] ~= KIND then
    return nil, E_WRONG_TYPE
  end
  local fence, permits = tonumber(got[2]), tonumber(got[3])
  local ok, holders = pcall(cmsgpack.unpack, got[4] or '')
  if fence == nil or permits == nil or not ok or type(holders) ~= 'table' then
    return nil, E_WRONG_TYPE
  end
  for _, h in ipairs(holders) do
    if type(h) ~= 'table' or type(h[1]) ~= 'number' or type(h[2]) ~= 'string' or type(h[3]) ~= 'number' then
      return nil, E_WRONG_TYPE
    end
  end
  return { fence = fence, permits = permits, holders = holders, wake_until = tonumber(got[5]) or 0 }
end

-- Writes the state back; with a floor, the key expires RETENTION_MS after its last lease ends.
local function store(key, floor, lock, now)
  redis.call('HSET', key, 'kind', KIND, 'fence', int(lock.fence), 'permits', int(lock.permits),
    'holders', cmsgpack.pack(lock.holders))
  if floor then
    local idle_from = now
    for _, h in ipairs(lock.holders) do
      if h[3] > idle_from then
        idle_from = h[3]
      end
    end
    redis.call('PEXPIREAT', key, int(math.ceil(idle_from / 1000) + RETENTION_MS))
  end
end

local function live(lock, now)
  local out = {}
  for _, h in ipairs(lock.holders) do
    if now < h[3] then
      out[#out + 1] = h
    end
  end
  return out
end

local function find(holders, token)
  for i, h in ipairs(holders) do
    if h[2] == token then
      return h, i
    end
  end
  return nil
end

-- This server process: it changes on every restart and differs between a primary and the
-- replica promoted in its place, so a new one starts a new epoch. A user whose ACL denies
-- INFO gets no epochs: fences then rise from the floor alone, which a restart from the AOF
-- keeps, but grants a failed primary made and its replica never saw can repeat.
--
-- A library keeps its Lua state between calls until it is loaded again or the server
-- restarts, so the run id (fixed for the process) is asked for once: INFO costs a third of a
-- grant. A script (EVALSHA) starts afresh each call and asks every time.
local this_run
local function run_id()
  if this_run then
    return this_run
  end
  local info = redis.pcall('INFO', 'server')
  local run = type(info) == 'string' and string.match(info, 'run_id:(%w+)')
  if not run then
    return 'no-info'
  end
  this_run = run
  return run
end

-- The fence of a new grant on a key whose last fence is `key_fence`, kept in the floor (or in
-- the key's own `lock.run`, without a floor). A new epoch (another server process than the
-- one that last granted: a restart, a promotion, a slot's new owner) starts at the wall
-- clock's floor, ms x FENCES_PER_MS, or EPOCH_GAP above the last fence when the clock is behind
-- it, so grants its predecessor made and this server never saw cannot be repeated.
local function next_fence(key, floor, key_fence, now)
  local run = run_id()
  local base, seen
  if floor then
    local got = redis.call('HMGET', floor, 'fence', 'run')
    base, seen = tonumber(got[1]) or 0, got[2]
  else
    base, seen = 0, redis.call('HGET', key, 'run')
  end
  if key_fence > base then
    base = key_fence
  end
  if seen ~= run then
    local at = math.floor(now / 1000) * FENCES_PER_MS
    if at > base then
      base = at
    else
      base = base + EPOCH_GAP
    end
  end
  local fence = base + 1
  if fence > MAX_SAFE_FENCE then
    return nil
  end
  if floor then
    redis.call('HSET', floor, 'fence', int(fence), 'run', run)
  else
    redis.call('HSET', key, 'run', run)
  end
  return fence
end

local function acquire(keys, args)
  if #args < 2 or (#args - 2) % 2 ~= 0 or (#args - 2) / 2 > 3 then
    return arity('fencedlock.acquire')
  end
  local key, floor, wake, bad = keys_of(keys)
  if bad then return fail(bad) end
  local token = args[1]
  if not check_token(token) then return fail(E_BAD_TOKEN) end
  local ttl, bad_ttl = parse_ttl(args[2])
  if not ttl then return fail(bad_ttl) end
  local block, label, permits
  for i = 3, #args, 2 do
    local word, value = string.upper(args[i]), args[i + 1]
    if word == 'BLOCK' and block == nil then
      block = parse_u64(value)
      if block == nil or block > MAX_BLOCK_MS then return fail(E_BAD_TIMEOUT) end
    elseif word == 'LABEL' and label == nil then
      if #value < 1 or #value > MAX_LABEL_LEN then return fail(E_BAD_LABEL) end
      label = value
    elseif word == 'PERMITS' and permits == nil then
      permits = parse_u64(value)
      if permits == nil or permits < 1 or permits > MAX_PERMITS then return fail(E_BAD_PERMITS) end
    else
      return fail(E_SYNTAX)
    end
  end
  permits = permits or 1

  local lock, wrong = load(key)
  if wrong then return fail(wrong) end
  local now = now_us()
  local deadline = now + ttl * 1000
  local holding = {}
  if lock then
    holding = live(lock, now)
    if #holding > 0 and lock.permits ~= permits then
      return fail(E_PERMITS_MISMATCH[1] .. int(lock.permits) .. E_PERMITS_MISMATCH[2])
    end
    local mine = find(holding, token)
    if mine then
      -- The holder asks again (its reply was lost): same fence, the lease restarts.
      mine[3] = deadline
      if label then mine[4] = label end
      store(key, floor, lock, now)
      return mine[1]
    end
    if #holding >= lock.permits then
      -- A waiter (it names the wake-up list) asks releases to wake it until the leases it
      -- was refused for end; after that it asks again by itself.
      if wake then
        local until_us = 0
        for _, h in ipairs(holding) do
          if h[3] > until_us then until_us = h[3] end
        end
        if until_us > lock.wake_until then
          redis.call('HSET', key, 'wake_until', int(until_us))
        end
      end
      return false
    end
  end
  local fence = next_fence(key, floor, lock and lock.fence or 0, now)
  if not fence then return fail(E_FENCES_EXHAUSTED) end
  if permits == 1 then holding = {} end
  holding[#holding + 1] = { fence, token, deadline, label or false }
  store(key, floor, { fence = fence, permits = permits, holders = holding }, now)
  return fence
end

local function renew(keys, args)
  if #args ~= 2 then return arity('fencedlock.renew') end
  local key, floor, _, bad = keys_of(keys)
  if bad then return fail(bad) end
  if not check_token(args[1]) then return fail(E_BAD_TOKEN) end
  local ttl, bad_ttl = parse_ttl(args[2])
  if not ttl then return fail(bad_ttl) end
  local lock, wrong = load(key)
  if wrong then return fail(wrong) end
  if not lock then return 0 end
  local now = now_us()
  local mine = find(live(lock, now), args[1])
  if not mine then return 0 end
  mine[3] = now + ttl * 1000
  store(key, floor, lock, now)
  return 1
end

local function release(keys, args)
  if #args ~= 1 then return arity('fencedlock.release') end
  local key, floor, wake, bad = keys_of(keys)
  if bad then return fail(bad) end
  if not check_token(args[1]) then return fail(E_BAD_TOKEN) end
  local lock, wrong = load(key)
  if wrong then return fail(wrong) end
  if not lock then return 0 end
  local now = now_us()
  local mine, at = find(lock.holders, args[1])
  if not mine or now >= mine[3] then return 0 end
  table.remove(lock.holders, at)
  store(key, floor, lock, now)
  if wake and lock.wake_until > now then
    -- One wake-up per freed permit, for the longest-blocked waiter; the list never holds
    -- more than the key's permits, and a wake-up nobody took goes after WAKE_TTL_MS. Only
    -- while a waiter asked to be woken: most releases have nobody to wake.
    redis.call('RPUSH', wake, '1')
    redis.call('LTRIM', wake, -lock.permits, -1)
    redis.call('PEXPIRE', wake, WAKE_TTL_MS)
  end
  return 1
end

local function raise(keys, args)
  if #args ~= 2 then return arity('fencedlock.raise') end
  local key, floor, _, bad = keys_of(keys)
  if bad then return fail(bad) end
  if not check_token(args[1]) then return fail(E_BAD_TOKEN) end
  local fence = parse_u64(args[2])
  if fence == nil or fence < 1 or string.rep('0', 20 - #args[2]) .. args[2] > '09223372036854775807' then return fail(E_BAD_FENCE) end
  local lock, wrong = load(key)
  if wrong then return fail(wrong) end
  if not lock or lock.permits ~= 1 then return false end
  local now = now_us()
  local mine = find(live(lock, now), args[1])
  if not mine then return false end
  if fence > MAX_SAFE_FENCE then return fail(E_FENCES_EXHAUSTED) end
  if fence > lock.fence then
    lock.fence = fence
    mine[1] = fence
    store(key, floor, lock, now)
    if floor then
      local got = tonumber(redis.call('HGET', floor, 'fence')) or 0
      if fence > got then redis.call('HSET', floor, 'fence', int(fence)) end
    end
  end
  return lock.fence
end

local function cad(keys, args)
  if #args ~= 1 then return arity('fencedlock.cad') end
  if #keys ~= 1 then return fail(E_KEYS) end
  local got = redis.pcall('GET', keys[1])
  if type(got) == 'table' and got.err then return fail(E_WRONG_TYPE) end
  if got ~= args[1] then return 0 end
  redis.call('DEL', keys[1])
  return 1
end

local function status(keys, args)
  if #args ~= 0 or #keys == 0 then return arity('fencedlock.status') end
  if #keys ~= 1 then return fail(E_KEYS) end
  local lock, wrong = load(keys[1])
  if wrong then return fail(wrong) end
  if not lock then return false end
  local now = now_us()
  local holding = live(lock, now)
  local function pttl(h)
    return math.ceil((h[3] - now) / 1000)
  end
  if lock.permits > 1 then
    local entries = {}
    for i, h in ipairs(holding) do
      entries[i] = { h[1], pttl(h), h[4] }
    end
    return { lock.fence, #holding, lock.permits, entries }
  end
  local h = holding[1]
  if not h then return { lock.fence, 0, -1 } end
  if h[4] then return { lock.fence, 1, pttl(h), h[4] } end
  return { lock.fence, 1, pttl(h) }
end

local function version()
  return VERSION
end

-- The same source as a script, for servers that deny FUNCTION (fencedlock_protocol::functions::
-- eval_script: this file without its first line): `EVALSHA sha numkeys keys... function args...`,
-- ARGV[1] naming the function. Only a library load has `redis.register_function`.
if redis.register_function == nil then
  local handlers = {
    fencedlock_acquire = acquire, fencedlock_renew = renew, fencedlock_release = release,
    fencedlock_raise = raise, fencedlock_cad = cad, fencedlock_status = status,
    fencedlock_version = version,
  }
  local handler = handlers[ARGV[1]]
  if handler == nil then
    return fail(E_SCRIPT_FUNCTION)
  end
  return handler(KEYS, { unpack(ARGV, 2) })
end

-- Renewing, raising and ending a lease must work when the server is out of memory, as the
-- module's commands do (only its ACQUIRE is deny-oom): a new grant may be refused then.
redis.register_function('fencedlock_acquire', acquire)
-- (No loop: `pairs` is not among the globals a library may use while it loads.)
redis.register_function { function_name = 'fencedlock_renew', callback = renew, flags = { 'allow-oom' } }
redis.register_function { function_name = 'fencedlock_release', callback = release, flags = { 'allow-oom' } }
redis.register_function { function_name = 'fencedlock_raise', callback = raise, flags = { 'allow-oom' } }
redis.register_function { function_name = 'fencedlock_cad', callback = cad, flags = { 'allow-oom' } }
redis.register_function { function_name = 'fencedlock_status', callback = status, flags = { 'no-writes' } }
redis.register_function { function_name = 'fencedlock_version', callback = version, flags = { 'no-writes' } }
