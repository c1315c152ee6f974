#!lua name=leasefloor
-- A ladder of throwaway leases (issue #44), each rung one more of the Functions library's
-- guarantees, timed against redlock 4's scripts by lease_floor.py (server instructions and
-- time per call) and lease_floor.mjs (the lease as a Node client sees it). Not a lock to use:
-- no argument checks, no floor proof, no semaphores, read-write leases, labels or waiters.
local RETENTION_MS = 600000
local EMPTY = '\144'
local this_run

local function redlock_acquire(keys, args)
  for i, key in ipairs(keys) do if redis.call('exists', key) == 1 then return 0 end end
  for i, key in ipairs(keys) do redis.call('set', key, args[1], 'PX', args[2]) end
  return #keys
end
local function redlock_release(keys, args)
  local count = 0
  for i, key in ipairs(keys) do
    if redis.call('get', key) == args[1] then redis.pcall('del', key) count = count + 1 end
  end
  return count
end

-- fenced: keys = lock, floor (a counter)
local function fenced_acquire(keys, args)
  if redis.call('EXISTS', keys[1]) == 1 then return false end
  local fence = redis.call('INCR', keys[2])
  redis.call('SET', keys[1], args[1], 'PX', args[2])
  return fence
end
local function fenced_release(keys, args)
  if redis.call('GET', keys[1]) == args[1] then redis.call('DEL', keys[1]) return 1 end
  return 0
end

-- The next fence from a floor hash {fence, run}: a new epoch on another run.
local function next_fence(floor, now, key_fence)
  if not this_run then this_run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') end
  local got = redis.call('HMGET', floor, 'fence', 'run')
  local fence = tonumber(got[1]) or 0
  if key_fence > fence then fence = key_fence end
  if got[2] ~= this_run then
    local at = (now - now % 1000) / 1000 * 1024
    if at > fence then fence = at else fence = fence + 4294967296 end
  end
  fence = fence + 1
  local text = string.format('%d', fence)
  if got[2] == this_run then
    redis.call('HSET', floor, 'fence', text)
  else
    redis.call('HSET', floor, 'fence', text, 'run', this_run)
  end
  return fence, text
end

-- + epochs: keys = lock, floor (a hash)
local function epochs_acquire(keys, args)
  if redis.call('EXISTS', keys[1]) == 1 then return false end
  local t = redis.call('TIME')
  local fence = next_fence(keys[2], t[1] * 1000000 + t[2], 0)
  redis.call('SET', keys[1], args[1], 'PX', args[2])
  return fence
end

-- + lock record: keys = lock, floor (a hash)
local function record_acquire(keys, args)
  local got = redis.pcall('HMGET', keys[1], 'kind', 'fence', 'holders')
  if got.err then return redis.error_reply('WRONGTYPE') end
  if not got[1] then
    if redis.call('EXISTS', keys[1]) == 1 then return redis.error_reply('WRONGTYPE') end
  elseif got[1] ~= 'fencedlock' then
    return redis.error_reply('WRONGTYPE')
  end
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  if got[3] and got[3] ~= EMPTY then
    local h = cmsgpack.unpack(got[3])
    if h[1] and h[1][3] > now then return false end
  end
  local deadline = now + args[2] * 1000
  local fence, text = next_fence(keys[2], now, tonumber(got[2]) or 0)
  local holders = cmsgpack.pack({ { fence, args[1], deadline } })
  if got[1] then
    redis.call('HSET', keys[1], 'fence', text, 'holders', holders)
  else
    redis.call('HSET', keys[1], 'kind', 'fencedlock', 'fence', text, 'holders', holders)
  end
  redis.call('PEXPIREAT', keys[1], string.format('%d', (deadline - deadline % 1000) / 1000 + RETENTION_MS))
  return fence
end
local function record_release(keys, args)
  local got = redis.pcall('HMGET', keys[1], 'kind', 'holders')
  if got.err or got[1] ~= 'fencedlock' then return 0 end
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  local h = got[2] ~= EMPTY and cmsgpack.unpack(got[2])
  if not (h and h[1] and h[1][2] == args[1] and h[1][3] > now) then return 0 end
  redis.call('HSET', keys[1], 'holders', EMPTY)
  redis.call('PEXPIREAT', keys[1], string.format('%d', (now - now % 1000) / 1000 + RETENTION_MS))
  return 1
end

redis.register_function('redlock_acquire', redlock_acquire)
redis.register_function('redlock_release', redlock_release)
redis.register_function('fenced_acquire', fenced_acquire)
redis.register_function('fenced_release', fenced_release)
redis.register_function('epochs_acquire', epochs_acquire)
redis.register_function('record_acquire', record_acquire)
redis.register_function('record_release', record_release)
