package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/loadtest/client"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// Reads while Redis hangs (issue #18 item 8). A stopped Redis keeps its connections open and
// answers nothing, so a read that waits on it waits out its whole budget; the service must give
// the Redis step a short deadline of its own and read the product from Postgres instead. The
// pause-redis drill sends a few product reads while Redis is stopped and fails unless each one
// was answered 200, within hangReadBudget, before Redis came back.

const (
	hangProbes     = 5                      // reads sent while Redis is stopped
	hangProbeEvery = 200 * time.Millisecond // from the stop, between reads
	hangReadBudget = 3 * time.Second        // the longest a read may take
)

// hangRead is one read sent while Redis was stopped.
type hangRead struct {
	sent, answered time.Duration // since the run's start
	status         int           // 0: no answer
	err            string
}

// hangProbe is what the reads found.
type hangProbe struct {
	reads   []hangRead
	resumed time.Duration // when Redis was sent SIGCONT
}

// probeReads reads the hot product hangProbes times, one every hangProbeEvery from
// hangProbeEvery after it is called (just after Redis is stopped), each through the usual way in,
// and returns once every read has been answered or has given up.
func (d *drillEnv) probeReads(ctx context.Context) []hangRead {
	httpc := &http.Client{Timeout: hangReadBudget, Transport: &http.Transport{}}
	defer httpc.CloseIdleConnections()
	reads := make([]hangRead, hangProbes)
	var wg sync.WaitGroup
	for i := range hangProbes {
		if clock.Sleep(ctx, hangProbeEvery) != nil {
			reads = reads[:i]
			break
		}
		wg.Go(func() {
			r := &reads[i]
			r.sent = d.rec.Now()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/products/%d", d.client.Base(), d.hot), nil)
			if err == nil {
				var res *http.Response
				if res, err = httpc.Do(req); err == nil {
					_, err = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					r.status = res.StatusCode
				}
			}
			r.answered = d.rec.Now()
			if err != nil {
				r.err = client.ShortErr(err)
			}
		})
	}
	wg.Wait()
	return reads
}

// answeredWhileHung reports whether r was answered 200 within hangReadBudget while Redis was
// still stopped.
func (r hangRead) answeredWhileHung(resumed time.Duration) bool {
	return r.status == http.StatusOK && r.answered-r.sent <= hangReadBudget && r.answered < resumed
}

func (r hangRead) String() string {
	what := fmt.Sprint(r.status)
	if r.status == 0 {
		what = "no answer (" + r.err + ")"
	}
	return fmt.Sprintf("%s after %v", what, (r.answered - r.sent).Round(time.Millisecond))
}

// readsWhileRedisHung: every read sent while Redis was stopped was answered 200 in time.
func readsWhileRedisHung(d *drillEnv, _ []*model.Op, _ availability) (failed, notes []string) {
	d.mu.Lock()
	p := d.hang
	d.mu.Unlock()
	if p == nil {
		return []string{"no product reads were sent while Redis was stopped"}, nil
	}
	ok := 0
	var each []string
	for _, r := range p.reads {
		if r.answeredWhileHung(p.resumed) {
			ok++
		}
		each = append(each, r.String())
	}
	summary := fmt.Sprintf("%d of %d product reads sent while Redis was stopped answered 200 within %v: %s",
		ok, hangProbes, hangReadBudget, strings.Join(each, ", "))
	if ok < hangProbes {
		return []string{summary}, nil
	}
	return nil, []string{summary}
}
