package benchmarks

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/report"
)

// A wrk job is one wrk process of a round of the -flood and -replays benchmarks: a closed loop
// of connections through the balancer, counting its answers by status (and whatever else its
// script counts) with the same `wrk-status` lines as statusLua, so parseWrkSummary reads them.

// wrkJob is what one wrk process sends.
type wrkJob struct {
	name    string   // names the output file
	conns   int      // connections
	threads int      // wrk threads (at most conns)
	script  string   // the Lua script's path
	path    string   // the URL path wrk is given (its default requests GET it)
	headers []string // -H arguments
	env     []string // the script's parameters
}

// wrkResult is what a wrk job printed and measured.
type wrkResult struct {
	wrkSummary
	counters map[string]int // the script's own `wrk-count NAME N` lines, summed over threads
	out      string
}

// perSecond is the answers with status per second of the job's window; 0 counts every answer.
func (r wrkResult) perSecond(status int) float64 {
	if r.window <= 0 {
		return 0
	}
	n := r.requests
	if status != 0 {
		n = r.statuses[status]
	}
	return float64(n) / r.window.Seconds()
}

var wrkCount = regexp.MustCompile(`(?m)^wrk-count (\S+) (\d+)$`)

// parseWrkCounters sums the `wrk-count NAME N` lines a script printed (one per wrk thread).
func parseWrkCounters(out string) map[string]int {
	counters := map[string]int{}
	for _, m := range wrkCount.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		counters[m[1]] += n
	}
	return counters
}

// wrkTimeout is how long wrk waits for an answer before it counts the request as timed out.
// Its default (2 s) is shorter than a recount of a big product under a flood takes; an answer
// must be counted by status, however slow.
const wrkTimeout = 30 * time.Second

// runWrkJobs runs jobs at once against the balancer at front for d (whole seconds, at least
// one), writes each one's output to dir/<round>-<name>.wrk.txt, and returns their results in
// the jobs' order.
func runWrkJobs(ctx context.Context, wrk, dir, round string, front int, d time.Duration, jobs ...wrkJob) ([]wrkResult, error) {
	results := make([]wrkResult, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			args := []string{"-t", strconv.Itoa(max(1, min(j.threads, j.conns))), "-c", strconv.Itoa(j.conns),
				"-d", fmt.Sprintf("%ds", max(1, int(d.Seconds()))), "--timeout", fmt.Sprintf("%ds", int(wrkTimeout.Seconds())),
				"--latency", "-s", j.script}
			for _, h := range j.headers {
				args = append(args, "-H", h)
			}
			args = append(args, fmt.Sprintf("http://127.0.0.1:%d%s", front, j.path))
			cmd := exec.CommandContext(ctx, wrk, args...)
			cmd.Env = append(os.Environ(), j.env...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			_ = os.WriteFile(filepath.Join(dir, round+"-"+j.name+".wrk.txt"), out.Bytes(), 0o644)
			if err != nil {
				errs[i] = fmt.Errorf("wrk %s: %w: %s", j.name, err, out.String())
				return
			}
			s, err := parseWrkSummary(out.String())
			if err != nil {
				errs[i] = fmt.Errorf("wrk %s: %w", j.name, err)
				return
			}
			if s.statuses == nil {
				s.statuses = map[int]int{} // no answer at all: every request failed
			}
			results[i] = wrkResult{wrkSummary: s, counters: parseWrkCounters(out.String()), out: out.String()}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, ctx.Err()
}

// answersOf lists answers by status, or says there were none.
func answersOf(statuses map[int]int) string {
	if len(statuses) == 0 {
		return "no answers"
	}
	return report.Statuses(statuses)
}
