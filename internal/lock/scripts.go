package lock

import "github.com/redis/go-redis/v9"

// The scripts share one layout of keys, all under the lock's hash tag so that Redis Cluster
// runs each script on one node:
//
//	KEYS[1] the lock: its value is the holder's token, its TTL the lease
//	KEYS[2] the fencing counter of the lock's name
//	KEYS[3] the list of clients waiting for the lock, in the order they asked
//	KEYS[4] the tickets of those clients (see below)
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

// Waiting clients form a FIFO in KEYS[3], a list of client ids (each at most once), and each
// leaves a ticket in KEYS[4]: the token its waiter will hold the lock with, the lease it wants
// and whether it wants a fencing token. A holder that lets go while the list is not empty does
// not free the lock for whoever asks first: it gives it to the client at the front — sets the
// lock to that client's token with its lease and a new fencing token, exactly what that client
// would have done itself — and publishes "<client id> <fence>". The waiter holds the lock as
// soon as the message arrives, without a round trip of its own, and clients take turns in the
// order they asked. A waiter whose message is lost finds its own token in the lock when it
// next looks (at least every recheck); a client that stops waiting takes its ticket back, and
// passes the lock on if it was given it meanwhile.

// obtainScript takes the lock if it is free.
//
// ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] "1" to issue a fencing token, ARGV[4] the client's
// id, ARGV[5] "1" if the caller waits (it then joins the list and leaves its ticket when it finds
// the lock held), ARGV[6] "1" if the caller may be listed (it leaves the list when it gets the
// lock), ARGV[7] how long to keep the list, in ms.
//
// Returns {1, fence} when obtained, {2, fence} when the lock already holds ARGV[1] — re-entered
// (the lease is extended and the holder's fence returned), given to this waiter by the last
// holder, or granted by an earlier run of this same attempt that go-redis resent after a lost
// reply — and {0, pttl} when held by someone else.
var obtainScript = redis.NewScript(fenceLua + `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[6] == '1' then
    redis.call('LREM', KEYS[3], 0, ARGV[4])
    redis.call('HDEL', KEYS[4], ARGV[4])
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
  if not redis.call('LPOS', KEYS[3], ARGV[4]) then
    redis.call('RPUSH', KEYS[3], ARGV[4])
  end
  redis.call('HSET', KEYS[4], ARGV[4], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
  redis.call('PEXPIRE', KEYS[4], ARGV[7])
end
return {0, redis.call('PTTL', KEYS[1])}
`)

// passOnLua gives a lock that is being let go to the client at the front of the list, if any
// (see above). Entries of the caller itself (ARGV[4]) and entries without a ticket are dropped.
// ARGV[5] is the channel. Returns whether it gave the lock to someone.
const passOnLua = `
local function passOn()
  while true do
    local front = redis.call('LPOP', KEYS[3])
    if not front then
      return false
    end
    local ticket = redis.call('HGET', KEYS[4], front)
    redis.call('HDEL', KEYS[4], front)
    if front ~= ARGV[4] and ticket then
      local token, ttl, fenced = string.match(ticket, '^(%S+) (%d+) (%d)$')
      if token then
        redis.call('SET', KEYS[1], token, 'PX', ttl)
        local f = 0
        if fenced == '1' then
          f = fence()
        end
        -- %d: concatenating a Lua number would print a large fence in exponent form.
        redis.call('PUBLISH', ARGV[5], front .. ' ' .. string.format('%d', f))
        return true
      end
    end
  end
end
`

// releaseScript lets a lock go: to the next waiting client (see above); else, when the caller
// names a waiter of its own (ARGV[2], a new token), to it directly — a new token, a full lease
// (ARGV[3] ms) and a new fencing token, in one round trip; else it deletes the lock.
//
// ARGV[1] holder's token, ARGV[2] new token or "", ARGV[3] ttl in ms for the new token,
// ARGV[4] client id, ARGV[5] channel, ARGV[6] "1" to issue a fencing token for the new token,
// ARGV[7] how long to keep the list, in ms.
//
// Returns {1, fence} when handed to the caller's waiter, {0, 0} when given to another client
// (the caller's waiter, if any, joins the back of the list with ARGV[2] as its ticket), {2, 0}
// when deleted, and {-1, 0} when ARGV[1] no longer held the lock. A lock already held with the
// new token was handed off by an earlier run of this same call, resent after a lost reply: it
// answers {1, fence} again rather than orphan the lock under a token its waiter never learns.
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
    redis.call('HSET', KEYS[4], ARGV[4], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[6])
    redis.call('PEXPIRE', KEYS[3], ARGV[7])
    redis.call('PEXPIRE', KEYS[4], ARGV[7])
  end
  return {0, 0}
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
  return {2, 0}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if ARGV[6] ~= '1' then
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

// forgetScript takes a client that stopped waiting off the list and, if the lock was given to
// its ticket (ARGV[1]) meanwhile, passes the lock on (or frees it).
// ARGV[1] the ticket's token, ARGV[4] client id, ARGV[5] channel (ARGV[2..3] unused).
var forgetScript = redis.NewScript(fenceLua + passOnLua + `
redis.call('LREM', KEYS[3], 0, ARGV[4])
redis.call('HDEL', KEYS[4], ARGV[4])
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) == ARGV[1] then
  if not passOn() then
    redis.call('DEL', KEYS[1])
  end
end
return 1
`)

// sweepScript clears what an attempt left behind when neither its reply nor its clean-up got
// through (a paused Redis runs both when it resumes, in an order nobody chose): if the lock
// holds the attempt's token, it goes to the next client in line or is freed, and the client's
// ticket is withdrawn if it still names that token. ARGV[1] the token, ARGV[4] client id,
// ARGV[5] channel (ARGV[2..3] unused).
var sweepScript = redis.NewScript(fenceLua + passOnLua + `
local ticket = redis.call('HGET', KEYS[4], ARGV[4])
if ticket and string.match(ticket, '^(%S+)') == ARGV[1] then
  redis.call('HDEL', KEYS[4], ARGV[4])
  redis.call('LREM', KEYS[3], 0, ARGV[4])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if not passOn() then
    redis.call('DEL', KEYS[1])
  end
end
return 1
`)
