-- pace_return: give back the slots a lease on a Redis Cluster reserved (pace.lua) but
-- could not fill (the site had fewer requests queued): the budget's schedule goes back
-- to the last slot used, unless another lease reserved slots after these meanwhile
-- (then they stay lost to the budget: never given twice).
--
-- KEYS[1] pace      hash  (see _pace.lua)
-- KEYS[2] throttle  hash  (see _pace.lua)
--
-- ARGV: quintuples of site, budget, the last slot reserved (as pace.lua returned it),
-- what to set instead ("": remove the field), probing ("1": the field is the site's
-- robots probe, "p:<site>" in throttle; "0": the budget's last slot, in pace)
-- Returns the number of reservations given back.

local pace_key, throttle_key = KEYS[1], KEYS[2]
local back = 0
for i = 1, #ARGV - 4, 5 do
  local site, budget, last, restore, probing = ARGV[i], ARGV[i + 1], ARGV[i + 2],
                                               ARGV[i + 3], ARGV[i + 4]
  local key, field = pace_key, budget
  if probing == '1' then key, field = throttle_key, 'p:' .. site end
  if redis.call('HGET', key, field) == last then
    if restore == '' then
      redis.call('HDEL', key, field)
    else
      redis.call('HSET', key, field, restore)
    end
    back = back + 1
  end
end
return back
