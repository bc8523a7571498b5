-- Seen-filter library, Bloom mode: prepended by the loader to every script that says
-- "uses: seen". A scalable Bloom filter on plain Redis strings used as bitmaps.
--
-- Layer i (1-based) is the string key keys[i + 1]; keys[1] is the meta hash:
--   layers     number of layers in use
--   m<i>       bits in layer i (at most 2^32, the largest BITFIELD offset)
--   k<i>       hash functions of layer i
--   cap<i>     elements layer i is sized for; n<i> elements added to it
-- The client passes every layer in use plus one spare key, so that a full last layer
-- is followed by a new one inside the same script (every key through KEYS).
-- Layer i targets error rate p0 * r^(i-1) with p0 = p * (1 - r): the sum over all
-- layers stays below p. Capacity grows by `growth` per layer, bits stop at 2^32.
--
-- seen_init(keys, args): args = {capacity, error_rate, growth, tightening}; raises
--   "CFSTALE <layers>" before any write when keys do not cover every layer + a spare
-- seen_add(fp)  -> 1 new (recorded in the last layer), 0 already present
-- seen_has(fp)  -> 1 possibly present, 0 certainly new
-- seen_finish() writes the element counts back; call it once at the end
-- seen_new_layers() -> number of layers this script created (the client then
--                      passes a new spare key next time)
-- Positions: h1, h2 are 32-bit words of the fingerprint (words 1,2 for odd layers,
-- 3,4 for even ones); bit j is (h1 + j * h2) mod m, h2 forced odd (double hashing).

local B_META, B_KEYS, B_LAYERS, B_M, B_K, B_CAP, B_N
local B_ARGS, B_CREATED, B_DIRTY = nil, 0, {}
local MAX_BITS = 4294967295
local PREALLOC_MAX_BYTES = 64 * 1024 * 1024

local function b_word(fp, i)
  local a, b, c, d = string.byte(fp, i, i + 3)
  return ((a or 0) * 16777216) + ((b or 0) * 65536) + ((c or 0) * 256) + (d or 0)
end

local function b_size(capacity, rate)
  local m = math.ceil(-capacity * math.log(rate) / (math.log(2) ^ 2))
  if m > MAX_BITS then m = MAX_BITS end
  local k = math.max(1, math.floor(m / capacity * math.log(2) + 0.5))
  return m, k
end

local function b_add_layer()
  local i = B_LAYERS + 1
  if B_KEYS[i] == nil then return false end
  local capacity, p, growth, r = B_ARGS[1], B_ARGS[2], B_ARGS[3], B_ARGS[4]
  local cap = capacity * (growth ^ (i - 1))
  local rate = p * (1 - r) * (r ^ (i - 1))
  local m, k = b_size(cap, rate)
  if m == MAX_BITS then cap = math.floor(m * (math.log(2) ^ 2) / -math.log(rate)) end
  redis.call('HSET', B_META, 'layers', i, 'm' .. i, m, 'k' .. i, k, 'cap' .. i, cap,
             'n' .. i, 0)
  -- allocate the bitmap at its exact size now: grown bit by bit, Redis 6.2 reserves up
  -- to 1 MB beyond the end (55% extra for a 1M-URL layer). Larger layers grow as they
  -- go, where that margin is small.
  local nbytes = math.ceil(m / 8)
  if nbytes <= PREALLOC_MAX_BYTES and redis.call('EXISTS', B_KEYS[i]) == 0 then
    redis.call('SET', B_KEYS[i], string.rep('\0', nbytes))
  end
  B_LAYERS = i
  B_M[i], B_K[i], B_CAP[i], B_N[i] = m, k, cap, 0
  B_CREATED = B_CREATED + 1
  return true
end

local function seen_init(keys, args)
  B_META = keys[1]
  B_KEYS = {}
  for i = 2, #keys do B_KEYS[i - 1] = keys[i] end
  B_ARGS = {tonumber(args[1]), tonumber(args[2]), tonumber(args[3]), tonumber(args[4])}
  B_M, B_K, B_CAP, B_N = {}, {}, {}, {}
  B_LAYERS = tonumber(redis.call('HGET', B_META, 'layers') or '0')
  for i = 1, B_LAYERS do
    local v = redis.call('HMGET', B_META, 'm' .. i, 'k' .. i, 'cap' .. i, 'n' .. i)
    B_M[i], B_K[i], B_CAP[i], B_N[i] = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]),
                                       tonumber(v[4])
  end
  if B_LAYERS >= #keys then
    -- another node added layers since this client last looked: it must pass them all
    error('CFSTALE ' .. B_LAYERS)
  end
  if B_LAYERS == 0 then b_add_layer() end
end

local function b_ops(fp, i, op)
  local off = (i % 2 == 1) and 1 or 9
  local h1, h2 = b_word(fp, off), b_word(fp, off + 4)
  if h2 % 2 == 0 then h2 = h2 + 1 end
  local m = B_M[i]
  local cmd = {'BITFIELD', B_KEYS[i]}
  for j = 0, B_K[i] - 1 do
    local pos = (h1 + j * h2) % m
    if op == 'GET' then
      cmd[#cmd + 1] = 'GET'; cmd[#cmd + 1] = 'u1'; cmd[#cmd + 1] = pos
    else
      cmd[#cmd + 1] = 'SET'; cmd[#cmd + 1] = 'u1'; cmd[#cmd + 1] = pos; cmd[#cmd + 1] = 1
    end
  end
  return redis.call(unpack(cmd))
end

local function b_all_set(bits)
  for j = 1, #bits do
    if bits[j] == 0 then return false end
  end
  return true
end

local function b_in_layer(fp, i)
  -- the key of a layer created by this script may not exist yet: nothing set
  return b_all_set(b_ops(fp, i, 'GET'))
end

local function seen_has(fp)
  for i = 1, B_LAYERS do
    if b_in_layer(fp, i) then return 1 end
  end
  return 0
end

local function seen_add(fp)
  for i = 1, B_LAYERS - 1 do
    if b_in_layer(fp, i) then return 0 end
  end
  local last = B_LAYERS
  if B_N[last] >= B_CAP[last] then
    if b_in_layer(fp, last) then return 0 end
    if b_add_layer() then last = B_LAYERS end
    -- no spare key left in this call: keep filling the last layer until the next call
  end
  if b_all_set(b_ops(fp, last, 'SET')) then return 0 end
  B_N[last] = B_N[last] + 1
  B_DIRTY[last] = true
  return 1
end

local function seen_finish()
  for i, _ in pairs(B_DIRTY) do
    redis.call('HSET', B_META, 'n' .. i, B_N[i])
  end
end

local function seen_new_layers()
  return B_CREATED
end
