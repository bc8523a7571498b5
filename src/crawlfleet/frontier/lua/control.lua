-- control: record a command for the nodes of a job (see frontier/control.py).
-- uses: counters, clock
--
-- KEYS[1] control   hash  "<scope>:<kind>" -> JSON {"seq", "value", "at"}
-- KEYS[2] counters  hash  (control_seq: the job's command sequence)
-- ARGV[1] field "<scope>:<kind>" (scope "*" or a node id; kind "state" or
--         "concurrency")    ARGV[2] value (validated by the caller)
-- Returns the command's sequence number (nodes apply the newest of each kind).

local control_key, counters_key = KEYS[1], KEYS[2]
local now = now_ms()
local seq = count(counters_key, 'control_seq', 1)
redis.call('HSET', control_key, ARGV[1], cjson.encode({seq = seq, value = ARGV[2], at = now}))
return seq
