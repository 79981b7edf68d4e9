package lock

import "github.com/redis/go-redis/v9"

// obtainScript takes the lock if it is free and, when asked, issues the next fencing token.
//
// KEYS[1] lock key, KEYS[2] fencing counter key (same hash slot).
// ARGV[1] token, ARGV[2] ttl in milliseconds, ARGV[3] "1" to issue a fencing token.
// Returns {1, fence} when obtained (fence is 0 when not fencing) and {0, pttl} when the key is
// held by someone else, pttl being the holder's remaining lease in milliseconds.
//
// A missing counter is seeded from the server clock in microseconds (TIME returns seconds and
// microseconds as strings; they are joined as text because Lua numbers are doubles and would
// print large values in exponent form).
var obtainScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] ~= '1' then
    return {1, 0}
  end
  if redis.call('EXISTS', KEYS[2]) == 0 then
    local now = redis.call('TIME')
    redis.call('SET', KEYS[2], now[1] .. string.format('%06d', tonumber(now[2])))
  end
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
`)

// releaseScript deletes the lock only while it still holds the caller's token.
// KEYS[1] lock key; ARGV[1] token. Returns 1 when deleted, 0 when not held.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// refreshScript extends the lease only while the lock still holds the caller's token.
// KEYS[1] lock key; ARGV[1] token, ARGV[2] ttl in milliseconds. Returns 1 or 0.
var refreshScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// ttlScript reports the remaining lease of the caller's lock, or -2 when it is not held.
// KEYS[1] lock key; ARGV[1] token.
var ttlScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -2
`)
