package view

import "github.com/redis/go-redis/v9"

// A product's view lives in two keys under the product's hash tag, so that Redis Cluster runs
// each script on one node:
//
//	KEYS[1] the view: a hash of the product's fields, its version and when it was read
//	KEYS[2] the epoch: which generation of views may be written, or "p:<ms>:<random>" while a
//	        write that raises the product's stock is under way and none may
//
// The epoch is what makes a restock safe to answer: a view is only written by someone who read
// the epoch before reading Postgres and finds it unchanged when writing, so a view read from
// Postgres before a restock can never be written after the restock began. Epochs are random,
// never counted, so that one that disappears (a Redis restart, an eviction) and is made again
// can never equal one a slow writer read before.

// epochLua returns the epoch to write views under: the current one, or a new one if there is
// none or a raise has been pending for longer than ARGV[2] ms (its writer died; Service bounds
// how long a raise may take far below that). A pending raise is returned as it is: then no view
// may be written. ARGV[1] is randomness for a new epoch. The age of a pending raise is judged by
// the Redis clock, the one it was stamped with.
var epochScript = redis.NewScript(`
local e = redis.call('GET', KEYS[2])
if e then
  if string.sub(e, 1, 2) ~= 'p:' then return e end
  local now = redis.call('TIME')
  local since = tonumber(string.match(e, '^p:(%d+):'))
  if since and now[1] * 1000 + math.floor(now[2] / 1000) - since < tonumber(ARGV[2]) then
    return e
  end
end
e = 'e:' .. ARGV[1]
redis.call('SET', KEYS[2], e)
return e
`)

// writeLua writes a view read under epoch ARGV[1], unless the epoch has changed or the stored
// view is as new or newer (version ARGV[3]). ARGV[2], when not empty, is the epoch to move to
// first (the end of a raise: then the view replaces whatever is there). ARGV[4] is the view's
// lifetime in ms; the rest are the hash's field/value pairs. The marks of writes the view
// reflects go; those of newer writes stay, a raise's included, since a purchase that marked
// may commit after the view was read. Returns 1 when written.
var writeScript = redis.NewScript(settleMarksLua + `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[2], ARGV[2])
  settle_marks(KEYS[1], ARGV[3], true)
else
  local v = redis.call('HGET', KEYS[1], 'version')
  if v and tonumber(v) >= tonumber(ARGV[3]) then return 0 end
  settle_marks(KEYS[1], ARGV[3], false)
end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
`)

// levelLua moves an existing view to a newer level after a committed purchase: stock ARGV[2]
// at version ARGV[1], updated at ARGV[3], read at ARGV[4]; ARGV[5] is the lifetime in ms. A
// missing view stays missing (it may have been deleted by a raise, whose epoch this writer
// never read), and an older level never overwrites a newer one. The marks of the writes it
// reflects go (version ARGV[1] and below). Returns 1 when written.
var levelScript = redis.NewScript(settleMarksLua + `
local v = redis.call('HGET', KEYS[1], 'version')
if not v or tonumber(v) >= tonumber(ARGV[1]) then return 0 end
settle_marks(KEYS[1], ARGV[1], false)
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'stock', ARGV[2], 'updated', ARGV[3], 'read', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`)

// raiseLua begins a raise: marks the epoch pending (stamped with the Redis clock and ARGV[1]'s
// randomness) and deletes the view. Returns the pending epoch.
var raiseScript = redis.NewScript(`
local now = redis.call('TIME')
local e = 'p:' .. (now[1] * 1000 + math.floor(now[2] / 1000)) .. ':' .. ARGV[1]
redis.call('SET', KEYS[2], e)
redis.call('DEL', KEYS[1])
return e
`)

// endRaiseLua ends a raise without a view to write (the raise failed, or its outcome is
// unknown): a new epoch, ARGV[2], if the pending one is still ARGV[1]. The next reader rebuilds
// the view from Postgres.
var endRaiseScript = redis.NewScript(`
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[1])
return 1
`)

// dropEpochLua deletes the epoch KEYS[1] if it is still ARGV[1]: the epoch of a product that
// turned out not to exist. Deleting it is safe: a writer that read it finds it changed.
var dropEpochScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
`)

// Purchases mark a view before they write (Cache.Writing): a field "w:<version>" of the view's
// hash holds, in microseconds on the purchaser's clock, when the write that will leave the
// product at that version began, at the earliest. A reader finds the marks with the view, in
// the one HGETALL, and a view with a mark newer than its version may be behind a committed
// write by as much as the mark's age. The mark goes when a view at its version or newer is
// written: by the purchase's own update, by a later one, or by a rebuild from Postgres.

// markLua marks view KEYS[1] as being written up to version ARGV[1], from ARGV[2] µs on the
// writer's clock; a mark already there for that version keeps its time, the earlier. ARGV[3]
// is the lifetime in ms: the hash lives that long from the mark. A view already at that version
// or newer needs no mark. A missing view gets a hash that holds only the mark, so that the
// rebuild which makes the view keeps it (readers take a hash without the view's fields for
// none). Returns 1 when marked.
var markScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], 'version')
if v and tonumber(v) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSETNX', KEYS[1], 'w:' .. ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// settleMarksLua defines settle_marks(key, version, all): it deletes the marks of version and
// below from view key; with all, every other field too (a raise's view replaces the old one).
const settleMarksLua = `
local function settle_marks(key, version, all)
  local n = tonumber(version)
  for _, f in ipairs(redis.call('HKEYS', key)) do
    local mark = string.match(f, '^w:(%d+)$')
    if (mark and tonumber(mark) <= n) or (not mark and all) then redis.call('HDEL', key, f) end
  end
end
`
