package lock

import "github.com/redis/go-redis/v9"

// The scripts share one layout of keys, all under the lock's hash tag so that Redis Cluster
// runs each script on one node:
//
//	KEYS[1] the lock: its value is the holder's token, its TTL the lease
//	KEYS[2] the fencing counter of the lock's name
//	KEYS[3] the line of waiters for the lock, in the order they asked
//	KEYS[4] the note the last holder left for the next one (see Lock.LeaveNote)
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

// Each waiting Obtain that finds the lock held puts one entry at the back of the line KEYS[3]:
// "<waiter id> <token> <ttl ms> <fenced>" — who it is, and what it would have set the lock to
// had it been free. A waiter's entry never changes while it waits, so the whole of it is the
// list element: it can be removed by value (LREM), and a holder letting go reads everything it
// needs from the element it pops. A holder that lets go while the line is not empty does not
// free the lock for whoever asks first: it gives it to the entry at the front — sets the lock
// to that waiter's token with its lease and a new fencing token, exactly what the waiter would
// have done itself — and publishes "<waiter id> <fence>" on the lock's channel. The waiter
// holds the lock as soon as the message arrives, without a round trip of its own, and waiters
// take turns in the order they asked, whichever client they belong to. A waiter whose message
// is lost finds its own token in the lock when it next looks; a waiter that stops waiting takes
// its entry back, and passes the lock on if it was given it meanwhile.

// obtainScript takes the lock if it is free.
//
// ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] "1" to issue a fencing token, ARGV[4] the caller's
// entry in the line, or "" when it does not wait, ARGV[5] how long to keep the line, in ms.
//
// Returns {1, fence, note} when obtained, {2, fence, note} when the lock already holds ARGV[1] —
// given to this waiter by the last holder, or granted by an earlier run of this same attempt
// that go-redis resent after a lost reply (the lease is extended and the fence the grant issued
// returned) — and {0, pttl} when held by someone else; a waiter is then in the line, once.
// note is what the last holder left ("" for none).
//
// SET with both NX and GET (Redis 7.0 and later) takes a free lock or reads its holder in one
// command. A waiter's first attempt may be sent twice (a lost reply): LPOS keeps the second run
// from listing it again, and LREM on success takes out an entry the first run left if the lock
// came free in between — either would otherwise have the lock given, later, to a token nobody
// holds.
var obtainScript = redis.NewScript(fenceLua + `
local holder = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
if not holder then
  if ARGV[4] ~= '' then
    redis.call('LREM', KEYS[3], 1, ARGV[4])
  end
  local note = redis.call('GET', KEYS[4]) or ''
  if ARGV[3] ~= '1' then
    return {1, 0, note}
  end
  return {1, fence(), note}
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local note = redis.call('GET', KEYS[4]) or ''
  if ARGV[3] ~= '1' then
    return {2, 0, note}
  end
  return {2, tonumber(redis.call('GET', KEYS[2]) or '0'), note}
end
if ARGV[4] ~= '' then
  if not redis.call('LPOS', KEYS[3], ARGV[4]) then
    redis.call('RPUSH', KEYS[3], ARGV[4])
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
end
return {0, redis.call('PTTL', KEYS[1])}
`)

// passOnLua gives a lock that is being let go to the entry at the front of the line, if any
// (see above), announcing it on channel with the note the last holder left, so that the new
// holder has it without asking. Malformed entries are dropped. Returns whether it gave the lock
// to someone.
const passOnLua = `
local function passOn(channel)
  while true do
    local front = redis.call('LPOP', KEYS[3])
    if not front then
      return false
    end
    local id, token, ttl, fenced = string.match(front, '^(%S+) (%S+) (%d+) ([01])$')
    if id then
      redis.call('SET', KEYS[1], token, 'PX', ttl)
      local f = 0
      if fenced == '1' then
        f = fence()
      end
      -- %d: concatenating a Lua number would print a large fence in exponent form.
      local note = redis.call('GET', KEYS[4]) or ''
      redis.call('PUBLISH', channel, id .. ' ' .. string.format('%d', f) .. ' ' .. note)
      return true
    end
  end
end
`

// releaseScript lets a lock go: to the waiter at the front of the line, else it deletes it.
// It first leaves the holder's note for the next holder (ARGV[3], kept ARGV[4] ms), or, when the
// holder left none, takes away the one before it: a holder that says nothing may have changed
// whatever the old note described. ARGV[1] holder's token, ARGV[2] channel. Returns 1 when let
// go, 0 when ARGV[1] no longer held the lock (the note is then left alone).
var releaseScript = redis.NewScript(fenceLua + passOnLua + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[4], ARGV[3], 'PX', ARGV[4])
else
  redis.call('DEL', KEYS[4])
end
if not passOn(ARGV[2]) then
  redis.call('DEL', KEYS[1])
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

// forgetScript undoes what an attempt may have left: its entry in the line (ARGV[2], "" for an
// attempt that did not wait) is taken out and, if the lock holds its token (ARGV[1]) — granted
// by a run whose reply never came, or given to the waiter while it was giving up — the lock is
// passed on to the next waiter or freed. ARGV[3] channel.
//
// It serves an attempt whose outcome is unknown, a waiter that stops waiting, and the sweep of
// an attempt whose clean-up failed: an entry names one waiter, never reused, so taking it out
// unconditionally can never remove a live waiter's place.
var forgetScript = redis.NewScript(fenceLua + passOnLua + `
if ARGV[2] ~= '' then
  redis.call('LREM', KEYS[3], 1, ARGV[2])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if not passOn(ARGV[3]) then
    redis.call('DEL', KEYS[1])
  end
end
return 1
`)

// raiseScript raises a Redlock node's fencing counter to the token the quorum issued, but only
// while the node still holds the caller's lock: a node whose lock is gone may already have
// granted it to the next holder, whose token must stay above ours, so raising there would be
// pointless at best. The counter never goes down. KEYS[1] lock, KEYS[2] fencing counter;
// ARGV[1] token, ARGV[2] fence. Returns 1 when the node holds the lock (and its counter is now
// at least ARGV[2]), 0 when it does not.
var raiseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
`)
