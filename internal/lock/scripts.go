package lock

import "github.com/redis/go-redis/v9"

// The scripts share one layout of keys, all under the lock's hash tag so that Redis Cluster
// runs each script on one node:
//
//	KEYS[1] the lock: its value is the holder's token, its TTL the lease
//	KEYS[2] the fencing counter of the lock's name
//	KEYS[3] the list of clients waiting for the lock, in the order they asked
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

// Waiting clients form a FIFO in KEYS[3]: a list of client ids, each at most once. A holder
// that releases while the list is not empty does not free the lock for whoever asks first: it
// reserves it ("r:<client id>", for reservation milliseconds) for the client at the front and
// publishes that id, so replicas take turns in the order they asked, and each reservation wakes
// exactly one waiter. A reservation nobody claims expires quickly; waiters also look again on
// a short timer, so a lost message costs little.

// obtainScript takes the lock if it is free or reserved for this client.
//
// ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] "1" to issue a fencing token, ARGV[4] the client's
// id, ARGV[5] "1" if the caller waits (it then joins the list of waiting clients when it finds
// the lock held), ARGV[6] "1" if the caller may be in that list (it is taken off when it gets
// the lock), ARGV[7] how long to keep the list, in ms.
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
local function take()
  if ARGV[6] == '1' then
    redis.call('LREM', KEYS[3], 0, ARGV[4])
  end
  if ARGV[3] ~= '1' then
    return {1, 0}
  end
  return {1, fence()}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return take()
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {2, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
if holder == 'r:' .. ARGV[4] then
  -- The holder that reserved it took this client off the list already.
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if ARGV[3] ~= '1' then
    return {1, 0}
  end
  return {1, fence()}
end
if ARGV[5] == '1' then
  if not redis.call('LPOS', KEYS[3], ARGV[4]) then
    redis.call('RPUSH', KEYS[3], ARGV[4])
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
end
return {0, redis.call('PTTL', KEYS[1])}
`)

// passOnLua gives a lock that is being let go to the client at the front of the list, if any:
// it reserves the lock for that client and publishes its id. Returns whether it did.
// ARGV[4] is the caller's id (skipped: a stale entry of its own), ARGV[5] the channel and
// ARGV[6] the reservation in ms.
const passOnLua = `
local function passOn()
  local front = redis.call('LPOP', KEYS[3])
  if front == ARGV[4] then
    front = redis.call('LPOP', KEYS[3])
  end
  if not front then
    return false
  end
  redis.call('SET', KEYS[1], 'r:' .. front, 'PX', ARGV[6])
  redis.call('PUBLISH', ARGV[5], front)
  return true
end
`

// releaseScript lets a lock go: to the next waiting client (see above); else, when the caller
// names a waiter of its own (ARGV[2], a new token), to it directly — a new token, a full lease
// (ARGV[3] ms) and a new fencing token, in one round trip; else it deletes the lock.
//
// ARGV[1] holder's token, ARGV[2] new token or "", ARGV[3] ttl in ms for the new token,
// ARGV[4] client id, ARGV[5] channel, ARGV[6] reservation in ms, ARGV[7] "1" to issue a
// fencing token, ARGV[8] how long to keep the list, in ms.
//
// Returns {1, fence} when handed to the caller's waiter, {0, 0} when reserved for another
// client (the caller, if it has a waiter, joins the back of the list), {2, 0} when deleted, and
// {-1, 0} when ARGV[1] no longer held the lock. A lock already held with the new token was
// handed off by an earlier run of this same call, resent after a lost reply: it answers
// {1, fence} again rather than orphan the lock under a token its waiter never learns.
var releaseScript = redis.NewScript(fenceLua + passOnLua + `
local holder = redis.call('GET', KEYS[1])
if ARGV[2] ~= '' and holder == ARGV[2] then
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
if holder ~= ARGV[1] then
  return {-1, 0}
end
if passOn() then
  if ARGV[2] ~= '' then
    if not redis.call('LPOS', KEYS[3], ARGV[4]) then
      redis.call('RPUSH', KEYS[3], ARGV[4])
    end
    redis.call('PEXPIRE', KEYS[3], ARGV[8])
  end
  return {0, 0}
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
  return {2, 0}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if ARGV[7] ~= '1' then
  return {1, 0}
end
return {1, fence()}
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

// forgetScript takes a client that stopped waiting off the list and, if the lock was reserved
// for it meanwhile, passes the reservation on (or frees the lock).
// ARGV[4] client id, ARGV[5] channel, ARGV[6] reservation in ms (ARGV[1..3] unused).
var forgetScript = redis.NewScript(passOnLua + `
redis.call('LREM', KEYS[3], 0, ARGV[4])
if redis.call('GET', KEYS[1]) == 'r:' .. ARGV[4] then
  if not passOn() then
    redis.call('DEL', KEYS[1])
  end
end
return 1
`)
