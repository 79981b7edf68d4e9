-- The preamble of every wrk script of the benchmarks (embedded by lua.go and put before each
-- script's own lines), so that they number threads, make keys and count answers alike.
--
-- Threads are numbered from 1 (tid); each one seeds its random numbers apart, counts its
-- requests (counter) and its answers by status (statuses), then calls the script's start(), if
-- it has one, for state of its own.
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end
function init(args)
  math.randomseed(os.time() * 1000 + tid)
  counter = 0
  statuses = {}
  if start then start() end
end
-- newKey counts a request and returns its own key: prefix, thread, counter and randomness,
-- unique across threads, and across processes given a prefix of their own.
function newKey(prefix)
  counter = counter + 1
  return string.format("%s-%d-%d-%08x%08x", prefix, tid, counter, math.random(0, 0x7fffffff), math.random(0, 0x7fffffff))
end
-- countStatus counts one answer by status; a script calls it from its response(), since a
-- script without one spares wrk the parsing of every answer.
function countStatus(status)
  statuses[status] = (statuses[status] or 0) + 1
end
-- printStatuses writes every thread's answers by status (`wrk-status CODE N`, which
-- parseWrkSummary reads), then calls more(thread), if given, for a script's own lines.
function printStatuses(more)
  for _, t in ipairs(threads) do
    for code, n in pairs(t:get("statuses")) do
      io.write(string.format("wrk-status %d %d\n", code, n))
    end
    if more then more(t) end
  end
end
