#!lua name=fencedlock
-- fencedlock without the module: the FENCEDLOCK.* commands as a Redis Functions library, for
-- servers that cannot load modules (managed services). Same arguments, replies and error texts:
--
--   FCALL fencedlock_acquire 2 key floor token ttl_ms [LABEL l] [PERMITS n | SHARED] [BLOCK ms]
--                            (3 key floor wake …: a waiter, see below)
--   FCALL fencedlock_acquireall N+1 key… floor token ttl_ms [LABEL l] [PERMITS n | SHARED]
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
-- while the key lives, and the key is never expired by the library. Each slot has exactly one
-- floor key, `fencedlock:fn-floor:{TAG}`: TAG is the one string of six digits, the first two
-- 0-7 and the other four 0-3, whose own slot is the lock key's (floor_tag below). Any other
-- floor key is refused: a second floor for one slot would let fences repeat.
--
-- `wake` (fencedlock_protocol::functions::wake_key) is the key's wake-up list: waiters BLPOP
-- on it between attempts, so the server wakes the longest-blocked one instead of everyone
-- polling. A waiter's ACQUIRE names it: its refusal records (`wake_until`) that releases
-- until the refusing leases end must wake someone; such a release pushes one element per
-- freed permit (at most `permits` kept, one for read leases, for WAKE_TTL_MS). Release always
-- names it.
--
-- SHARED asks for a read lease of a read-write lock (the key keeps `permits` 0); an ACQUIRE
-- without SHARED or PERMITS is its write lease. The module keeps readers from passing a
-- writer that waits in its queue; the library has no queue, so a waiting writer leaves a mark
-- instead: its refusal by read leases (a waiter's, naming `wake`) records `writer_until`, the
-- latest end of those leases, and each such refusal sets it anew. Until then a fresh read
-- lease (for a token that does not hold the key) is refused, also once the readers left, so
-- the woken writer finds the key free; the writer's grant (or any grant without SHARED)
-- clears the mark. A writer that gave up keeps new readers out until the mark ends: at most
-- the readers' ttl. A waiting reader leaves no mark: writers hold the key one at a time, and
-- each release's wake-up goes to the longest-blocked waiter, reader or writer. A release
-- wakes one waiter, as for a mutex; a woken reader that is granted (its attempt names `wake`)
-- passes a wake-up on, so the readers waiting behind it enter one after the other until one
-- is refused. A downgrade names no `wake` and wakes nobody: readers waiting for that writer
-- try again when the lease their nap was timed to would have ended. A reader the mark
-- refused may take the wake-up meant for the writer, which then tries again at its own nap's
-- end, about when the mark ends.
--
-- ACQUIREALL takes 1 to 64 distinct lock keys and then their floor (never optional: one floor
-- must cover every fence of the set, so every key is in the floor's slot, also outside a
-- cluster). Each key is decided exactly as ACQUIRE decides it (`decide`), writing nothing;
-- only when every key would be granted or re-entered, and the fences of the new grants fit
-- below MAX_SAFE_FENCE, is anything written: a script is not rolled back, so a set is never
-- half stored. A refusal (nil) or an error changes no key. It never waits and names no
-- wake-up list: a caller waiting for a set holds none of it, so two callers asking for
-- overlapping sets in any order cannot deadlock.
--
-- Leases run on the server's wall clock (TIME): a script has no monotonic clock. BLOCK is
-- checked and then ignored: a script cannot block, so a busy key is one refused attempt (nil),
-- as the module does inside MULTI and scripts; the client does the waiting (on `wake`).
--
-- Numbers in Lua are doubles: fences stay at or below MAX_SAFE_FENCE (2^53 - 1) to be exact.
-- The error texts below are the protocol crate's (a Rust test checks every one of them).

local VERSION = 12

local MAX_TOKEN_LEN = 512
local MAX_LABEL_LEN = 256
local MAX_PERMITS = 1024
local MAX_ACQUIRE_KEYS = 64
-- The `permits` of a key held by read leases (ACQUIRE … SHARED), as STATUS shows it.
local SHARED_PERMITS = 0
local MAX_TTL_MS = 86400000
local MAX_BLOCK_MS = 4398046511104
local MAX_FENCE = 9223372036854775807
local MAX_SAFE_FENCE = 9007199254740991
local RETENTION_MS = 600000
local FENCES_PER_MS = 1024
local EPOCH_GAP = 4294967296
local FLOOR_PREFIX = 'fencedlock:fn-floor:{'
-- A floor key's shape: the prefix, a tag (floor_tag) and the closing brace.
local FLOOR_SHAPE = '^fencedlock:fn%-floor:{[0-7][0-7][0-3][0-3][0-3][0-3]}$'
local WAKE_PREFIX = 'fencedlock:fn-wake:{'
local WAKE_TTL_MS = 10000
-- The `kind` field of every lock key the library writes: a hash of an application's that
-- happens to have `fence` or `holders` fields is WRONGTYPE, as any other value is.
local KIND = 'fencedlock'
-- An empty `holders` list as cmsgpack writes it (an array of none): a released mutex's, written
-- and read as is (cmsgpack.pack of it costs some 1,500 instructions, .unpack some 700).
local EMPTY_HOLDERS = '\144'
-- Whether this source runs as a script (EVALSHA) rather than as the loaded library: a script
-- keeps nothing between calls.
local as_script = redis.register_function == nil

local E_BAD_TTL = 'ERR ttl must be a positive integer number of milliseconds'
local E_TTL_TOO_LARGE = 'ERR ttl exceeds fencedlock.max-ttl-ms (86400000)'
local E_BAD_TOKEN = 'ERR token must be 1 to 512 bytes'
local E_BAD_FENCE = 'ERR fence must be an integer from 1 to 9223372036854775807'
local E_BAD_TIMEOUT = 'ERR timeout must be an integer number of milliseconds from 0 (no limit) to 4398046511104'
local E_BAD_LABEL = 'ERR label must be 1 to 256 bytes (it is public: STATUS shows it)'
local E_BAD_PERMITS = 'ERR permits must be an integer from 1 to 1024'
local E_SYNTAX = 'ERR syntax error: the options are BLOCK timeout_ms, LABEL label, and PERMITS n or SHARED, each at most once'
local E_PERMITS_MISMATCH = {'ERR permits mismatch: the key is held with PERMITS ', '; ask with the same count (it changes only while nobody holds the key)'}
local E_HELD_SHARED = 'ERR permits mismatch: the key is held SHARED; ask with SHARED (it changes only while nobody holds the key)'
local E_UPGRADE_REFUSED = 'ERR upgrade refused: the token holds the key SHARED; release it, then acquire without SHARED (a new, higher fence)'
local E_FENCES_EXHAUSTED = 'ERR fence space exhausted: no fence above 9223372036854775807 can be issued'
local E_WRONG_TYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local E_BAD_KEYS = 'ERR numkeys must be an integer from 1 to 64, followed by that many distinct keys'
local E_SCRIPT_FUNCTION = 'ERR fencedlock: as a script, the first argument names the function (fencedlock_acquire, _acquireall, _renew, _release, _raise, _cad, _status or _version)'
local E_KEYS = 'ERR fencedlock: pass the lock key and, optionally, the floor key of its slot (fencedlock:fn-floor:{tag}) and its wake-up list (fencedlock:fn-wake:{tag}:key) as the keys'
local E_FLOOR_KEY = "ERR fencedlock: wrong floor key; this lock key's is "
local E_WAKE_KEY = "ERR fencedlock: wrong wake-up list; this lock key's is "

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
-- '%d' (the number as a C long: exact for integers up to 2^53, all this library writes) costs
-- a fifth of '%.0f' (a float's decimal expansion, some 3,000 instructions a call).
-- A grant formats its fence twice (the key's and the floor's): the last one is kept.
local format, last_int, last_text
local function int(n)
  if n ~= last_int then
    last_int, last_text = n, format('%d', n)
  end
  return last_text
end

-- TIME's two decimal strings: Lua's arithmetic reads decimal strings itself, for half of what
-- two calls into `tonumber` cost (1,800 instructions instead of 4,000).
local function now_us()
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end

-- The library functions the key checks use, bound at the first call (a library may not touch
-- them while it loads): every read of a global goes through the sandbox's lookup, which would
-- cost more than the checks themselves.
local bxor, byte, char, str_find, str_sub

-- The floor proof (keys_refusal): the key's slot (CLUSTER KEYSLOT, a CRC16 the server's Lua
-- must compute itself: CLUSTER KEYSLOT from a script is refused outside cluster mode on Redis
-- 7.0) and whether a floor key is that slot's. All of it is made by floor_proof at its first
-- use: a script runs its whole source on every call, and made at the top these functions and
-- tables cost every call of the script form, also the calls on keys that exist (6% of an
-- ACQUIRE); the library makes them once per state.
local prove_floor
local function floor_proof()
  local bxor, byte, char, str_find, str_sub = bxor, byte, char, str_find, str_sub

  -- CRC16-XMODEM of each byte value (the checksum CLUSTER KEYSLOT hashes with).
  local CRC16 = {
    0, 4129, 8258, 12387, 16516, 20645, 24774, 28903, 33032, 37161, 41290, 45419, 49548, 53677, 57806, 61935,
    4657, 528, 12915, 8786, 21173, 17044, 29431, 25302, 37689, 33560, 45947, 41818, 54205, 50076, 62463, 58334,
    9314, 13379, 1056, 5121, 25830, 29895, 17572, 21637, 42346, 46411, 34088, 38153, 58862, 62927, 50604, 54669,
    13907, 9842, 5649, 1584, 30423, 26358, 22165, 18100, 46939, 42874, 38681, 34616, 63455, 59390, 55197, 51132,
    18628, 22757, 26758, 30887, 2112, 6241, 10242, 14371, 51660, 55789, 59790, 63919, 35144, 39273, 43274, 47403,
    23285, 19156, 31415, 27286, 6769, 2640, 14899, 10770, 56317, 52188, 64447, 60318, 39801, 35672, 47931, 43802,
    27814, 31879, 19684, 23749, 11298, 15363, 3168, 7233, 60846, 64911, 52716, 56781, 44330, 48395, 36200, 40265,
    32407, 28342, 24277, 20212, 15891, 11826, 7761, 3696, 65439, 61374, 57309, 53244, 48923, 44858, 40793, 36728,
    37256, 33193, 45514, 41451, 53516, 49453, 61774, 57711, 4224, 161, 12482, 8419, 20484, 16421, 28742, 24679,
    33721, 37784, 41979, 46042, 49981, 54044, 58239, 62302, 689, 4752, 8947, 13010, 16949, 21012, 25207, 29270,
    46570, 42443, 38312, 34185, 62830, 58703, 54572, 50445, 13538, 9411, 5280, 1153, 29798, 25671, 21540, 17413,
    42971, 47098, 34713, 38840, 59231, 63358, 50973, 55100, 9939, 14066, 1681, 5808, 26199, 30326, 17941, 22068,
    55628, 51565, 63758, 59695, 39368, 35305, 47498, 43435, 22596, 18533, 30726, 26663, 6336, 2273, 14466, 10403,
    52093, 56156, 60223, 64286, 35833, 39896, 43963, 48026, 19061, 23124, 27191, 31254, 2801, 6864, 10931, 14994,
    64814, 60687, 56684, 52557, 48554, 44427, 40424, 36297, 31782, 27655, 23652, 19525, 15522, 11395, 7392, 3265,
    61215, 65342, 53085, 57212, 44955, 49082, 36825, 40952, 28183, 32310, 20053, 24180, 11923, 16050, 3793, 7920,
  }

  -- The CRC16 of byte b followed by k zero bytes at p[k][b], k = 0 to 15: the checksum is
  -- linear, so a chunk of 16 bytes is the XOR of one entry per byte and of the register moved
  -- past those 16 bytes (p[15] of its high byte, p[14] of its low byte). A call into `bit` or
  -- `string` costs some 500 instructions; the checksum byte by byte with the table above made
  -- 3 per byte (about 43,000 instructions for 24 bytes), by chunks it makes 2 per 16 bytes,
  -- and each byte costs one table lookup (sixteen tables, indexed by the byte itself: no
  -- arithmetic for the index; each in an upvalue of crc16, p0 to p15, since taking them out of
  -- p on every call cost some 2,000 instructions). The library makes them once per state (some
  -- 3,800 XORs, a millisecond; the collector then traverses them, some 500 instructions a
  -- call); a script would make them on every new key, so it goes byte by byte, with one call
  -- per byte (and no upvalues for tables it does not have: a script makes them on every new
  -- key).
  --
  -- crc16(s): the CRC16 of `s`, a whole number of chunks of 8 bytes.
  local crc16
  if not as_script then
    local p = { [0] = {} }
    for b = 0, 255 do
      p[0][b] = CRC16[b + 1]
    end
    for k = 1, 15 do
      local prev, t = p[k - 1], {}
      for b = 0, 255 do
        -- One more zero byte: the register shifted by 8 bits, its high byte folded back in.
        local v = prev[b]
        local lo = v % 256
        t[b] = bxor(CRC16[(v - lo) / 256 + 1], lo * 256)
      end
      p[k] = t
    end
    local p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, p13, p14, p15 =
      p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15]

    -- Each pair of chunks read by one call. An odd first chunk goes alone: it needs no terms
    -- for the register (still 0), and a key of up to 8 bytes not the second half of the tables
    -- (padding to 16 bytes instead cost a key of 24 bytes some 4,000 instructions). It is read
    -- by one call with the chunk after it (a call into `string.byte` costs some 1,000).
    crc16 = function(s)
      local crc, n, first = 0, #s, 1
      if n % 16 ~= 0 then
        -- The register is 0: no terms for it.
        if n == 8 then
          local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, 1, 8)
          return bxor(p7[b1], p6[b2], p5[b3], p4[b4], p3[b5], p2[b6], p1[b7], p0[b8])
        end
        local b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15, b16, b17, b18, b19, b20, b21, b22,
          b23, b24 = byte(s, 1, 24)
        crc = bxor(p7[b1], p6[b2], p5[b3], p4[b4], p3[b5], p2[b6], p1[b7], p0[b8])
        local lo = crc % 256
        crc = bxor(p15[(crc - lo) / 256], p14[lo], p15[b9], p14[b10], p13[b11], p12[b12], p11[b13], p10[b14],
          p9[b15], p8[b16], p7[b17], p6[b18], p5[b19], p4[b20], p3[b21], p2[b22], p1[b23], p0[b24])
        first = 25
      end
      for i = first, n, 16 do
        local b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15, b16 = byte(s, i, i + 15)
        local lo = crc % 256
        crc = bxor(p15[(crc - lo) / 256], p14[lo], p15[b1], p14[b2], p13[b3], p12[b4], p11[b5], p10[b6], p9[b7],
          p8[b8], p7[b9], p6[b10], p5[b11], p4[b12], p3[b13], p2[b14], p1[b15], p0[b16])
      end
      return crc
    end
  else
    -- One byte into the register `crc`, by CRC16: the register shifted by a byte, and the
    -- table's entry of (its high byte XOR the byte), which (the table is linear) is the XOR of
    -- their two entries: one call.
    local function step(crc, b)
      local lo = crc % 256
      return bxor(CRC16[(crc - lo) / 256 + 1], CRC16[b + 1], lo * 256)
    end

    crc16 = function(s)
      local crc = 0
      for i = 1, #s, 8 do
        local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, i, i + 7)
        crc = step(step(step(step(step(step(step(step(crc, b1), b2), b3), b4), b5), b6), b7), b8)
      end
      return crc
    end
  end

  -- CLUSTER KEYSLOT of `key`: the CRC16 of the key, or of its hash tag (the bytes between the
  -- first '{' and the next '}', when there are any), modulo 16384. Leading zero bytes leave
  -- the CRC (its register starts at 0) as it is: the key is padded at its front to whole
  -- chunks.
  local function key_slot(key)
    local open = str_find(key, '{', 1, true)
    if open then
      local close = str_find(key, '}', open + 1, true)
      if close and close > open + 1 then
        key = str_sub(key, open + 1, close - 1)
      end
    end
    local tail = #key % 8
    if tail > 0 then
      key = str_sub('\0\0\0\0\0\0\0', tail) .. key
    end
    return crc16(key) % 16384
  end

  -- The CRC16 of a floor tag's digit d (48 to 55, '0' to '7') at place j (1 to 6) of the tag,
  -- at TAG_CRC[(j - 1) * 8 + d - 47]: the CRC of the six digits is the XOR of their entries.
  local TAG_CRC = {
    12172, 27180, 42188, 57708, 10541, 27789, 41581, 59341, 3310, 42687, 18541, 57916, 34280, 12217, 49515, 27450,
    11497, 23133, 49537, 46901, 58904, 37036, 2928, 32196, 50597, 62101, 43973, 40181, 6501, 11861, 30469, 16437,
    1429, 13988, 25591, 20678, 51537, 64096, 44851, 39938, 13907, 9842, 5649, 1584, 30423, 26358, 22165, 18100,
  }

  -- floor_tag's inverse of the tag -> slot map: the map is linear over GF(2) in the tag's 14
  -- digit bits (each digit is '0' plus at most 3 bits), offset by the slot of '000000'.
  local TAG_ORIGIN = 14824
  local TAG_BASIS = { 9330, 1644, 15661, 3282, 4143, 4379, 6710, 1144, 14597, 13687, 9318, 1604, 13672, 7256 }

  -- The floor tag of `slot` (fencedlock_protocol::functions::floor_tag): six digits, the first
  -- two 0-7 and the other four 0-3 (14 bits, high bits first), whose own slot is `slot`.
  -- Exactly one such tag hashes to each slot, so each slot has exactly one floor key. Only a
  -- refusal names it: the proof below compares the floor's own tag instead.
  local function floor_tag(slot)
    local v, x = bxor(slot, TAG_ORIGIN), 0
    for i = 1, 14 do
      local low = v % 2
      if low == 1 then
        x = bxor(x, TAG_BASIS[i])
      end
      v = (v - low) / 2
    end
    local d6 = x % 4
    x = (x - d6) / 4
    local d5 = x % 4
    x = (x - d5) / 4
    local d4 = x % 4
    x = (x - d4) / 4
    local d3 = x % 4
    x = (x - d3) / 4
    local d2 = x % 8
    return char(48 + (x - d2) / 8, 48 + d2, 48 + d3, 48 + d4, 48 + d5, 48 + d6)
  end

  -- nil and the floor's tag when `floor` is the floor key of `key`'s slot, else the right one.
  -- A floor key's shape (FLOOR_SHAPE) whose tag's own slot is the key's is the right one (one
  -- tag of that shape hashes to each slot), so the proof reads the floor's digits (one call)
  -- and XORs their six entries (one more) instead of making floor_tag(slot) (14 steps) and the
  -- key's name. The tag is taken first (a new key records it) and the floor compared to its
  -- name made from it (equal only when the floor is the prefix, six bytes and '}').
  return function(key, floor)
    local slot = key_slot(key)
    local tag = str_sub(floor, 22, 27)
    if floor == FLOOR_PREFIX .. tag .. '}' then
      local d1, d2, d3, d4, d5, d6 = byte(tag, 1, 6)
      if d1 >= 48 and d1 <= 55 and d2 >= 48 and d2 <= 55 and d3 >= 48 and d3 <= 51
        and d4 >= 48 and d4 <= 51 and d5 >= 48 and d5 <= 51 and d6 >= 48 and d6 <= 51 then
        local t = TAG_CRC
        if bxor(t[d1 - 47], t[d2 - 39], t[d3 - 31], t[d4 - 23], t[d5 - 15], t[d6 - 7]) % 16384 == slot then
          return nil, tag
        end
      end
    end
    return FLOOR_PREFIX .. floor_tag(slot) .. '}'
  end
end

-- This server process: it changes on every restart and differs between a primary and the
-- replica promoted in its place, so a new one starts a new epoch. A user whose ACL denies
-- INFO gets no epochs: fences then rise from the floor alone, which a restart from the AOF
-- keeps, but grants a failed primary made and its replica never saw can repeat. The same INFO
-- tells whether the server is a Redis Cluster node (see keys_of).
--
-- A library keeps its Lua state between calls until it is loaded again or the server
-- restarts, so these facts (fixed for the process) are asked for once: INFO costs a third of
-- a grant. A script (EVALSHA) starts afresh each call and asks every time it grants.
local this_run, in_cluster
local function server_facts()
  if this_run then
    return this_run, in_cluster
  end
  local info = redis.pcall('INFO', 'server', 'cluster')
  local run = type(info) == 'string' and string.match(info, 'run_id:(%w+)')
  if not run then
    return 'no-info', false
  end
  this_run, in_cluster = run, string.find(info, 'cluster_enabled:1', 1, true) ~= nil
  return this_run, in_cluster
end

-- The lock key, its floor and its wake-up list (each when given): the error reply as the
-- fourth value when there are too many or too few (their names are checked once the lock key
-- is read: keys_refusal).
local function bind_globals()
  if not bxor then
    bxor, byte, char, str_find, str_sub = bit.bxor, string.byte, string.char, string.find, string.sub
    format = string.format
  end
end

local function keys_of(keys)
  if #keys < 1 or #keys > 3 then
    return nil, nil, nil, E_KEYS
  end
  bind_globals()
  return keys[1], keys[2], keys[3]
end

-- The refusal of a floor key or wake-up list other than the lock key's own, nil when they are
-- its own: fences kept in a second floor could repeat, and releases pushed onto another list
-- would wake nobody. `lock` is the key's state (nil for a missing key). Called before anything
-- is written.
--
-- The floor is known when it is the one the lock key recorded (`lock.tag`, the tag its last
-- write was checked with). In a Redis Cluster the server itself refuses keys of two slots in
-- one call (CROSSSLOT), so a floor key of the right shape is the one of the key's slot (one tag
-- of that shape hashes to each slot). Elsewhere the key's CRC16 decides (floor_proof): about
-- 13,500 instructions for a key of 24 bytes on the library (16,000 before version 12) and
-- 2,500 more per 8 bytes (byte by byte, before version 8: 43,000 for the checksum of 24
-- bytes), more as a script, which is why the key records its tag. (A cache of checked keys in
-- the library's state would cost more: every object a library keeps is traversed by the
-- collector on every call.)
local function keys_refusal(key, floor, wake, lock)
  if floor == nil then
    return nil
  end
  local tag
  if lock and lock.tag and floor == FLOOR_PREFIX .. lock.tag .. '}' then
    -- store need not compare the floor again.
    lock.same_floor = true
  else
    local clustered = false
    if not as_script then
      local _
      _, clustered = server_facts()
    end
    if not (clustered and str_find(floor, FLOOR_SHAPE)) then
      prove_floor = prove_floor or floor_proof()
      local expected
      expected, tag = prove_floor(key, floor)
      if expected then
        return E_FLOOR_KEY .. expected
      end
    end
  end
  if wake ~= nil then
    local expected = WAKE_PREFIX .. str_sub(floor, #FLOOR_PREFIX + 1) .. ':' .. key
    if wake ~= expected then
      return E_WAKE_KEY .. expected
    end
  end
  -- The floor's tag when the proof took it, for a new key to record.
  return nil, tag
end

-- The lock key's state: { fence, permits, holders = { {fence, token, deadline_us, label or
-- false}, ... } } in grant order (expired holders included until the next grant), and the
-- waiters' marks (0 when unset); nil for a missing key; nil and the error reply for a key
-- that is not a lock. `got` is read(key)'s reply when a fast path read it already.
local function read(key)
  return redis.pcall('HMGET', key, 'kind', 'fence', 'permits', 'holders', 'wake_until', 'floor', 'writer_until')
end

local function load(key, got)
  got = got or read(key)
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
  -- A mutex's permits ('1') by comparison (strings are interned: no call into tonumber).
  local fence, permits = tonumber(got[2]), got[3] == '1' and 1 or tonumber(got[3])
  local ok, holders
  if got[4] == EMPTY_HOLDERS then
    ok, holders = true, {}
  else
    ok, holders = pcall(cmsgpack.unpack, got[4] or '')
  end
  if fence == nil or permits == nil or not ok or type(holders) ~= 'table' then
    return nil, E_WRONG_TYPE
  end
  for i = 1, #holders do
    local h = holders[i]
    if type(h) ~= 'table' or type(h[1]) ~= 'number' or type(h[2]) ~= 'string' or type(h[3]) ~= 'number' then
      return nil, E_WRONG_TYPE
    end
  end
  -- `stored_fence` and `stored_permits` stay as read, for store. The marks are mostly unset:
  -- no call into tonumber then.
  return { fence = fence, permits = permits, holders = holders, wake_until = got[5] and tonumber(got[5]) or 0,
    tag = got[6], writer_until = got[7] and tonumber(got[7]) or 0, kind = got[1], stored_fence = fence,
    stored_permits = permits }
end

-- The key expires RETENTION_MS after `idle_from` (µs), rounded up to the ms.
local function expire_after(key, idle_from)
  -- By arithmetic: math.ceil is a call.
  local sub_ms = idle_from % 1000
  local ms = (idle_from - sub_ms) / 1000
  if sub_ms > 0 then ms = ms + 1 end
  redis.call('PEXPIREAT', key, int(ms + RETENTION_MS))
end

-- Writes the state back; with a floor, the key records its floor's tag (keys_refusal) and
-- expires RETENTION_MS after its last lease ends. `was` is the key's state as load read it
-- (nil for a new key): the fields it already holds are not written again, so a renewal or a
-- release writes the holders alone, and a grant on a key that exists its fence beside them
-- (each field written costs some 2,000 instructions).
local function store(key, floor, lock, now, was)
  local list = lock.holders
  local holders = #list == 0 and EMPTY_HOLDERS or cmsgpack.pack(list)
  if was and was.kind and was.stored_permits == lock.permits and (not floor or was.same_floor) then
    if was.stored_fence == lock.fence then
      redis.call('HSET', key, 'holders', holders)
    else
      redis.call('HSET', key, 'fence', int(lock.fence), 'holders', holders)
    end
  elseif not floor then
    redis.call('HSET', key, 'kind', KIND, 'fence', int(lock.fence), 'permits', int(lock.permits), 'holders', holders)
  else
    redis.call('HSET', key, 'kind', KIND, 'fence', int(lock.fence), 'permits', int(lock.permits), 'holders', holders,
      'floor', str_sub(floor, #FLOOR_PREFIX + 1, -2))
  end
  if floor then
    local idle_from = now
    for i = 1, #list do
      local ends = list[i][3]
      if ends > idle_from then
        idle_from = ends
      end
    end
    expire_after(key, idle_from)
  end
end

-- (Loops here count with numbers: `ipairs` makes its iterator and calls it on every step, some
-- 900 instructions more over one holder.)
local function live(lock, now)
  local out, holders = {}, lock.holders
  for i = 1, #holders do
    local h = holders[i]
    if now < h[3] then
      out[#out + 1] = h
    end
  end
  return out
end

local function find(holders, token)
  for i = 1, #holders do
    local h = holders[i]
    if h[2] == token then
      return h, i
    end
  end
  return nil
end

-- The highest fence this library state has issued or raised a lock to (nil before its first,
-- and in every call of the script form). A floor deleted by FLUSHALL or DEL starts a new epoch
-- at the wall clock's ms, and two such starts within one ms (two FLUSHALLs, or clients whose
-- commands run in one event-loop pass) would otherwise begin at the same fence.
local issued

local function note_issued(fence)
  if issued == nil or fence > issued then
    issued = fence
  end
end

-- The fence of a new grant on a key whose last fence is `key_fence`, kept in the floor (or in
-- the key's own `lock.run`, without a floor). A new epoch (another server process than the
-- one that last granted: a restart, a promotion, a slot's new owner, a deleted floor) starts
-- at the wall clock's floor, ms x FENCES_PER_MS, or EPOCH_GAP above the last fence when the
-- clock is behind it, so grants its predecessor made and this server never saw cannot be
-- repeated. It also starts above every fence this library state issued; a fresh state (a
-- (re)load of the library) cannot know what its predecessor issued in this ms and starts at
-- the next one.
--
-- `base` and `seen` are the floor's fence and the run that last wrote it (the key's own `run`
-- without a floor). Writes nothing: nil when the fence would pass MAX_SAFE_FENCE.
local function fence_after(base, seen, key_fence, run, now)
  if key_fence > base then
    base = key_fence
  end
  if seen ~= run then
    local at = math.floor(now / 1000) * FENCES_PER_MS
    if issued == nil then
      at = at + FENCES_PER_MS
    elseif issued > at then
      at = issued
    end
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
  return fence
end

-- The floor's fence and the run that wrote it.
local function floor_state(floor)
  local got = redis.call('HMGET', floor, 'fence', 'run')
  return tonumber(got[1]) or 0, got[2]
end

-- Records `fence` as issued by this run (in the floor, or the key's `run` without one); `seen`
-- is the run that wrote it last, which needs no writing again.
local function take_fence(key, floor, fence, run, seen)
  if floor then
    if seen == run then
      redis.call('HSET', floor, 'fence', int(fence))
    else
      redis.call('HSET', floor, 'fence', int(fence), 'run', run)
    end
  elseif seen ~= run then
    redis.call('HSET', key, 'run', run)
  end
  note_issued(fence)
end

-- The next fence for a grant on `key` (fence_after), taken; nil when the space is exhausted.
local function next_fence(key, floor, key_fence, now)
  local run = server_facts()
  local base, seen
  if floor then
    base, seen = floor_state(floor)
  else
    base, seen = 0, redis.call('HGET', key, 'run')
  end
  local fence = fence_after(base, seen, key_fence, run, now)
  if fence then
    take_fence(key, floor, fence, run, seen)
  end
  return fence
end

-- A refused ACQUIRE (nil). A waiter (it names the wake-up list) asks releases to wake it until
-- the leases it was refused for end (or `after`, the mark that refused it); after that it asks
-- again by itself. A writer refused by read leases also marks that it waits (see the header).
local function refusal(key, wake, lock, holding, writer_waits, after)
  if wake then
    local until_us = after or 0
    for _, h in ipairs(holding) do
      if h[3] > until_us then until_us = h[3] end
    end
    if writer_waits and until_us ~= lock.writer_until then
      redis.call('HSET', key, 'wake_until', int(math.max(until_us, lock.wake_until)), 'writer_until', int(until_us))
    elseif until_us > lock.wake_until then
      redis.call('HSET', key, 'wake_until', int(until_us))
    end
  end
  return false
end

-- ACQUIRE's arguments after the keys: { token, ttl, block, label, permits, shared }, with
-- `permits` the count the key is held with once granted (SHARED_PERMITS for a read lease) and
-- false for an option not given; or nil and the error reply.
local ASK = { token = false, ttl = false, block = false, label = false, permits = false, shared = false }
local function parse_ask(args)
  local token = args[1]
  if not check_token(token) then return nil, E_BAD_TOKEN end
  local ttl, bad_ttl = parse_ttl(args[2])
  if not ttl then return nil, bad_ttl end
  -- One table for every call (a call runs alone and keeps no ask past its end): a table made
  -- per call costs some 3,000 instructions.
  local ask = ASK
  ask.token, ask.ttl, ask.block, ask.label, ask.permits, ask.shared = token, ttl, false, false, false, false
  local i = 3
  while i <= #args do
    local word, value = string.upper(args[i]), args[i + 1]
    if word == 'SHARED' and not ask.shared and not ask.permits then
      ask.shared = true
      i = i + 1
    else
      if value == nil then return nil, E_SYNTAX end
      if word == 'BLOCK' and not ask.block then
        ask.block = parse_u64(value)
        if not ask.block or ask.block > MAX_BLOCK_MS then return nil, E_BAD_TIMEOUT end
      elseif word == 'LABEL' and not ask.label then
        if #value < 1 or #value > MAX_LABEL_LEN then return nil, E_BAD_LABEL end
        ask.label = value
      elseif word == 'PERMITS' and not ask.permits and not ask.shared then
        ask.permits = parse_u64(value)
        if not ask.permits or ask.permits < 1 or ask.permits > MAX_PERMITS then return nil, E_BAD_PERMITS end
      else
        return nil, E_SYNTAX
      end
      i = i + 2
    end
  end
  if ask.shared then
    ask.permits = SHARED_PERMITS
  else
    ask.permits = ask.permits or 1
  end
  return ask
end

-- What ACQUIRE would do to `lock` (nil: a missing key) at `now`, writing nothing, so that
-- ACQUIREALL grants a set exactly when each key alone would be granted:
--   'new', holders        a new lease, joining these live holders (none for a mutex);
--   'kept', fence         the token's own lease, restarted in `lock` (a re-entry, or a
--                         writer's downgrade): store `lock`;
--   'refused', holders, writer_waits, after
--                         nil for the caller (see refusal);
--   'error', text         the error reply.
local function decide(lock, ask, now, deadline)
  if not lock then return 'new', {} end
  local holding = live(lock, now)
  local mine = find(holding, ask.token)
  if #holding > 0 and lock.permits ~= ask.permits then
    if lock.permits > 1 or ask.permits > 1 then
      if lock.permits == SHARED_PERMITS then return 'error', E_HELD_SHARED end
      return 'error', E_PERMITS_MISMATCH[1] .. int(lock.permits) .. E_PERMITS_MISMATCH[2]
    end
    -- Readers (0) and a writer (1): the other mode holds the key.
    if not mine then return 'refused', holding, not ask.shared end
    -- A reader's upgrade would deadlock against another reader's.
    if not ask.shared then return 'error', E_UPGRADE_REFUSED end
    -- The writer downgrades: its fence stays, the lease restarts as a read lease.
    lock.permits = SHARED_PERMITS
  end
  if mine then
    -- The holder asks again (its reply was lost, or it downgrades): same fence, the lease
    -- restarts.
    mine[3] = deadline
    if ask.label then mine[4] = ask.label end
    return 'kept', mine[1]
  end
  if #holding >= (ask.shared and MAX_PERMITS or ask.permits) then
    return 'refused', holding, false
  end
  -- Readers do not pass a writer that waits (it may be woken and not yet here).
  if ask.shared and lock.writer_until > now then
    return 'refused', holding, false, lock.writer_until
  end
  if ask.permits == 1 then holding = {} end
  return 'new', holding
end

-- Stores a new lease of `fence` beside `holding` (decide's 'new'); `lock` is the key's state
-- before it.
local function grant(key, floor, lock, ask, holding, fence, deadline, now)
  holding[#holding + 1] = { fence, ask.token, deadline, ask.label }
  if lock then
    -- load's table keeps what the key held (stored_fence, stored_permits) for store.
    lock.fence, lock.permits, lock.holders = fence, ask.permits, holding
    store(key, floor, lock, now, lock)
  else
    store(key, floor, { fence = fence, permits = ask.permits, holders = holding }, now, nil)
  end
  if not ask.shared and lock and lock.writer_until > 0 then
    redis.call('HDEL', key, 'writer_until')
  end
end

-- The plain mutex's fast paths (version 11): a write lease without options on a key that
-- does not exist, or on a free mutex (no holder, no writer's mark) that recorded this floor;
-- and the release of a mutex's one live holder. They decide and write exactly as the general
-- path (decide, grant, store) does for those cases, with the same fields in the same form
-- (a version 10 key is read as it is, and a version 10 library reads what they write), but
-- from the HMGET's values in locals: no state table, holder tables or lists of live holders.
-- Anything else (an option, holders to check, a refusal, a floor or wake-up list to prove
-- against a recorded tag, a foreign or damaged key) goes the general way, with `got` passed
-- on so the key is read once. nil when the fast path does not apply; writes nothing then.

-- A lease of `token` on `key`, which does not exist (got[1] to got[4] unset: a missing key,
-- or a hash of an application's, which EXISTS tells apart).
local function acquire_new(key, floor, wake, token, ttl, got)
  if got.err or got[1] or got[2] or got[3] or got[4] then return nil end
  -- A hash without the library's fields (an application's), or any other value.
  if redis.call('EXISTS', key) == 1 then return fail(E_WRONG_TYPE) end
  local refused, tag = keys_refusal(key, floor, wake, nil)
  if refused then return fail(refused) end
  local now = now_us()
  local deadline = now + ttl * 1000
  local fence = next_fence(key, floor, 0, now)
  if not fence then return fail(E_FENCES_EXHAUSTED) end
  -- store's every field for a new key, and its expiry: the lease's end plus RETENTION_MS.
  redis.call('HSET', key, 'kind', KIND, 'fence', int(fence), 'permits', '1',
    'holders', cmsgpack.pack({ { fence, token, deadline, false } }), 'floor', tag or str_sub(floor, #FLOOR_PREFIX + 1, -2))
  expire_after(key, deadline)
  return fence
end

-- Whether got (a key's HMGET) is a mutex (the library's kind, permits '1') that recorded
-- this floor, and `wake`, when named, is its wake-up list: keys_refusal's first case.
local function mutex_here(key, floor, wake, got)
  local tag = got[6]
  return got[3] == '1' and got[1] == KIND and tag and floor == FLOOR_PREFIX .. tag .. '}'
    and (wake == nil or wake == WAKE_PREFIX .. tag .. '}:' .. key)
end

-- A lease of `token` on a free mutex: no holders (a released one's empty list) and no
-- writer's mark (which a grant would delete).
local function acquire_free(key, floor, wake, token, ttl, got)
  if got[4] ~= EMPTY_HOLDERS or got[7] or not mutex_here(key, floor, wake, got) then return nil end
  local key_fence = tonumber(got[2])
  if not key_fence then return nil end
  local now = now_us()
  local deadline = now + ttl * 1000
  local fence = next_fence(key, floor, key_fence, now)
  if not fence then return fail(E_FENCES_EXHAUSTED) end
  redis.call('HSET', key, 'fence', int(fence), 'holders', cmsgpack.pack({ { fence, token, deadline, false } }))
  expire_after(key, deadline)
  return fence
end

local function acquire(keys, args)
  -- Three valued options and the SHARED flag: 0 to 7 words after the ttl.
  if #args < 2 or #args > 9 then
    return arity('fencedlock.acquire')
  end
  local key, floor, wake, bad = keys_of(keys)
  if bad then return fail(bad) end
  local ask, bad_ask = parse_ask(args)
  if not ask then return fail(bad_ask) end
  local got
  if #args == 2 and floor then
    -- No options: a write lease, PERMITS 1, no label.
    got = read(key)
    local done = acquire_new(key, floor, wake, ask.token, ask.ttl, got)
      or acquire_free(key, floor, wake, ask.token, ask.ttl, got)
    if done ~= nil then return done end
  end
  local lock, wrong = load(key, got)
  if wrong then return fail(wrong) end
  local refused = keys_refusal(key, floor, wake, lock)
  if refused then return fail(refused) end
  local now = now_us()
  local deadline = now + ask.ttl * 1000
  local outcome, detail, writer_waits, after = decide(lock, ask, now, deadline)
  if outcome == 'error' then return fail(detail) end
  if outcome == 'refused' then return refusal(key, wake, lock, detail, writer_waits, after) end
  if outcome == 'kept' then
    store(key, floor, lock, now, lock)
    return detail
  end
  local fence = next_fence(key, floor, lock and lock.fence or 0, now)
  if not fence then return fail(E_FENCES_EXHAUSTED) end
  grant(key, floor, lock, ask, detail, fence, deadline, now)
  if ask.shared and wake and lock and lock.wake_until > now then
    -- A woken reader passes the wake-up on: the readers behind it may enter too, and a release
    -- wakes only one waiter (the cascade ends at the first waiter refused, or after WAKE_TTL_MS).
    redis.call('RPUSH', wake, '1')
    redis.call('LTRIM', wake, -1, -1)
    redis.call('PEXPIRE', wake, WAKE_TTL_MS)
  end
  return fence
end

-- ACQUIREALL: every key decided first, in order (the first refusal or error is the reply, and
-- nothing is written), then every new grant's fence computed from the one floor, then all
-- of it stored. See the header.
local function acquireall(keys, args)
  local count = #keys - 1
  -- As the module answers `ACQUIREALL count keys… args…`: the server's arity check below 5
  -- words, then the count, then the token and the ttl after the keys.
  if 2 + count + #args < 5 then return arity('fencedlock.acquireall') end
  if count < 1 or count > MAX_ACQUIRE_KEYS or #args < 2 then return fail(E_BAD_KEYS) end
  local named = {}
  for i = 1, count do
    if named[keys[i]] then return fail(E_BAD_KEYS) end
    named[keys[i]] = true
  end
  bind_globals()
  local floor = keys[count + 1]
  local ask, bad_ask = parse_ask(args)
  if not ask then return fail(bad_ask) end
  -- The command never waits (see the header).
  if ask.block then return fail(E_SYNTAX) end
  local now = now_us()
  local deadline = now + ask.ttl * 1000
  local decided = {}
  for i = 1, count do
    local key = keys[i]
    local lock, wrong = load(key)
    if wrong then return fail(wrong) end
    local refused = keys_refusal(key, floor, nil, lock)
    if refused then return fail(refused) end
    local outcome, detail = decide(lock, ask, now, deadline)
    if outcome == 'error' then return fail(detail) end
    if outcome == 'refused' then return false end
    decided[i] = { lock = lock, outcome = outcome, detail = detail }
  end
  -- The new grants' fences, in key order, each above the last (a key's own fence may be above
  -- the floor's after a RAISE); all must fit before the first write.
  local run = server_facts()
  local base, seen = floor_state(floor)
  local written, last = seen, nil
  for _, d in ipairs(decided) do
    if d.outcome == 'new' then
      d.fence = fence_after(base, seen, d.lock and d.lock.fence or 0, run, now)
      if not d.fence then return fail(E_FENCES_EXHAUSTED) end
      base, seen, last = d.fence, run, d.fence
    end
  end
  local fences = {}
  for i, d in ipairs(decided) do
    if d.outcome == 'new' then
      grant(keys[i], floor, d.lock, ask, d.detail, d.fence, deadline, now)
      fences[i] = d.fence
    else
      store(keys[i], floor, d.lock, now, d.lock)
      fences[i] = d.detail
    end
  end
  if last then take_fence(nil, floor, last, run, written) end
  return fences
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
  local refused = keys_refusal(key, floor, nil, lock)
  if refused then return fail(refused) end
  if not lock then return 0 end
  local now = now_us()
  local mine = find(live(lock, now), args[1])
  if not mine then return 0 end
  mine[3] = now + ttl * 1000
  store(key, floor, lock, now, lock)
  return 1
end

-- The release of a mutex's one holder (its list of one, well formed, as load checks it), as
-- the general path does it: 1 and the empty list when `token` holds it live, 0 when its lease
-- ended; nil for anything else.
local function release_mutex(key, floor, wake, token, got)
  local packed = got[4]
  if not packed or packed == EMPTY_HOLDERS or not mutex_here(key, floor, wake, got) then return nil end
  local ok, list = pcall(cmsgpack.unpack, packed)
  if not ok or type(list) ~= 'table' or #list ~= 1 then return nil end
  local h = list[1]
  -- h[2] == token proves it a string.
  if type(h) ~= 'table' or h[2] ~= token or type(h[1]) ~= 'number' or type(h[3]) ~= 'number'
    or not tonumber(got[2]) then
    return nil
  end
  local now = now_us()
  if now >= h[3] then return 0 end
  redis.call('HSET', key, 'holders', EMPTY_HOLDERS)
  expire_after(key, now)
  if wake and got[5] and (tonumber(got[5]) or 0) > now then
    -- As the general release: one wake-up, a mutex's list keeps one.
    redis.call('RPUSH', wake, '1')
    redis.call('LTRIM', wake, -1, -1)
    redis.call('PEXPIRE', wake, WAKE_TTL_MS)
  end
  return 1
end

local function release(keys, args)
  if #args ~= 1 then return arity('fencedlock.release') end
  local key, floor, wake, bad = keys_of(keys)
  if bad then return fail(bad) end
  if not check_token(args[1]) then return fail(E_BAD_TOKEN) end
  local got
  if floor then
    got = read(key)
    local done = release_mutex(key, floor, wake, args[1], got)
    if done ~= nil then return done end
  end
  local lock, wrong = load(key, got)
  if wrong then return fail(wrong) end
  local refused = keys_refusal(key, floor, wake, lock)
  if refused then return fail(refused) end
  if not lock then return 0 end
  local now = now_us()
  local mine, at = find(lock.holders, args[1])
  if not mine or now >= mine[3] then return 0 end
  -- table.remove, without the call.
  local holders = lock.holders
  for i = at, #holders do
    holders[i] = holders[i + 1]
  end
  store(key, floor, lock, now, lock)
  if wake and lock.wake_until > now then
    -- One wake-up per freed permit, for the longest-blocked waiter; the list never holds
    -- more than the key's permits (one for read leases: what their release frees is the
    -- writer's), and a wake-up nobody took goes after WAKE_TTL_MS. Only while a waiter asked
    -- to be woken: most releases have nobody to wake.
    redis.call('RPUSH', wake, '1')
    redis.call('LTRIM', wake, -math.max(lock.permits, 1), -1)
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
  local refused = keys_refusal(key, floor, nil, lock)
  if refused then return fail(refused) end
  if not lock or lock.permits ~= 1 then return false end
  local now = now_us()
  local mine = find(live(lock, now), args[1])
  if not mine then return false end
  if fence > MAX_SAFE_FENCE then return fail(E_FENCES_EXHAUSTED) end
  if fence > lock.fence then
    lock.fence = fence
    mine[1] = fence
    note_issued(fence)
    store(key, floor, lock, now, lock)
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
  if lock.permits ~= 1 then
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
    fencedlock_acquire = acquire, fencedlock_acquireall = acquireall, fencedlock_renew = renew,
    fencedlock_release = release,
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
redis.register_function('fencedlock_acquireall', acquireall)
-- (No loop: `pairs` is not among the globals a library may use while it loads.)
redis.register_function { function_name = 'fencedlock_renew', callback = renew, flags = { 'allow-oom' } }
redis.register_function { function_name = 'fencedlock_release', callback = release, flags = { 'allow-oom' } }
redis.register_function { function_name = 'fencedlock_raise', callback = raise, flags = { 'allow-oom' } }
redis.register_function { function_name = 'fencedlock_cad', callback = cad, flags = { 'allow-oom' } }
redis.register_function { function_name = 'fencedlock_status', callback = status, flags = { 'no-writes' } }
redis.register_function { function_name = 'fencedlock_version', callback = version, flags = { 'no-writes' } }
