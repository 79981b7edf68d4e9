package lock

import "github.com/redis/go-redis/v9"

// The scripts share one layout of keys, all under the lock's hash tag so that Redis Cluster
// runs each script on one node:
//
//	KEYS[1] the lock: its value is the holder's token, its TTL the lease
//	KEYS[2] the fencing counter of the lock's name
//	KEYS[3] the set of clients with a waiter parked on the lock (see obtainScript)
//
// Every script keeps to as few Redis commands as it can: each one counts when the lock is hot.

// fenceLua issues the next fencing token of KEYS[2]. INCR on a missing counter answers 1: then
// the counter was never there or was lost (a restart without persistence, an eviction), and it
// jumps to the server clock in microseconds, past every token issued before. TIME's seconds and
// microseconds are joined as text: Lua numbers are doubles and would print large values in
// exponent form, although they hold them exactly.
const fenceLua = `
local function fence()
  local f = redis.call('INCR', KEYS[2])
  if f == 1 then
    local now = redis.call('TIME')
    local seeded = now[1] .. string.format('%06d', tonumber(now[2]))
    redis.call('SET', KEYS[2], seeded)
    f = redis.call('INCR', KEYS[2])
  end
  return f
end
`

// obtainScript takes the lock if it is free.
//
// ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] "1" to issue a fencing token, ARGV[4] the client's
// id, ARGV[5] "1" if the caller waits for a release (it is then recorded in KEYS[3], so the
// holder knows to release rather than hand the lock to a waiter of its own), ARGV[6] "1" if the
// caller was recorded there before.
//
// Returns {1, fence} when obtained, {2, fence} when re-entered (the lease is extended and the
// holder's fence returned), and {0, pttl} when held by someone else.
//
// A lock already held with ARGV[1] is re-entered whoever asks: tokens are random, so that is
// either Options.Token or this very attempt sent again — go-redis resends a script whose reply
// timed out or whose connection broke, and the first run may have granted the lock. Reporting
// that as held by someone else would leave the caller waiting for itself until the lease ran
// out, with the lock held by no one.
var obtainScript = redis.NewScript(fenceLua + `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[6] == '1' then
    redis.call('SREM', KEYS[3], ARGV[4])
  end
  if ARGV[3] ~= '1' then
    return {1, 0}
  end
  return {1, fence()}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {2, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
if ARGV[5] == '1' then
  redis.call('SADD', KEYS[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
end
return {0, redis.call('PTTL', KEYS[1])}
`)

// handoffScript passes the lock from its holder to the next waiter of the same client, in one
// round trip and with every guarantee of a fresh obtain: a new token, a full lease and a new
// fencing token. If a waiter of another client is recorded, it releases instead (and
// publishes the release), so that other replicas get their turn.
//
// ARGV[1] old token, ARGV[2] new token, ARGV[3] ttl in ms, ARGV[4] the client's id,
// ARGV[5] the release channel, ARGV[6] "1" to issue a fencing token.
// Returns {1, fence} when handed off, {0, 0} when released for others, {-1, 0} when the old
// token no longer held the lock. A lock already held with the new token was handed off by an
// earlier run of this same call, sent again by go-redis after a lost reply: it answers
// {1, fence} again rather than orphan the lock under a token its waiter never learns.
var handoffScript = redis.NewScript(fenceLua + `
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[2] then
  if ARGV[6] ~= '1' then
    return {1, 0}
  end
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
if holder ~= ARGV[1] then
  return {-1, 0}
end
local waiting = redis.call('SCARD', KEYS[3])
if waiting > 1 or (waiting == 1 and redis.call('SISMEMBER', KEYS[3], ARGV[4]) == 0) then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[5], '1')
  return {0, 0}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if ARGV[6] ~= '1' then
  return {1, 0}
end
return {1, fence()}
`)

// releaseScript deletes the lock only while it still holds the caller's token, and announces
// the release on the lock's channel when someone is recorded as waiting.
// KEYS[1] lock, KEYS[3] waiters (KEYS[2] unused); ARGV[1] token, ARGV[2] channel.
// Returns 1 when released, 0 when not held.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('PUBLISH', ARGV[2], '1')
end
return 1
`)

// refreshScript extends the lease only while the lock still holds the caller's token.
// KEYS[1] lock; ARGV[1] token, ARGV[2] ttl in ms. Returns 1 or 0.
var refreshScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// ttlScript reports the remaining lease of the caller's lock, or -2 when it is not held.
// KEYS[1] lock; ARGV[1] token.
var ttlScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -2
`)

// forgetScript removes the client from the waiters of a lock it no longer waits for.
// KEYS[3] waiters; ARGV[1] client id.
var forgetScript = redis.NewScript(`
return redis.call('SREM', KEYS[3], ARGV[1])
`)
