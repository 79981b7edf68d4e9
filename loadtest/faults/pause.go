package faults

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/async/asyncpg"
	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/failpoint"
)

// pauseLineHolder finds the replica whose Postgres session holds product's line lock — the one
// draining the asynchronous orders — and SIGSTOPs it for pause, then SIGCONTs it. A paused
// process keeps its connections up (the kernel answers for it), so only the lock's lease
// (idle_session_timeout) can hand the line to another replica; the run then shows how long
// that took. It returns the paused replica's name.
func pauseLineHolder(ctx context.Context, d *drillEnv, pool *pgxpool.Pool, product int64, pause time.Duration) (string, error) {
	classID, objID, objSubID := asyncpg.LineLockKeys(product)
	var victim *cluster.Replica
	deadline := time.Now().Add(5 * time.Second)
	for victim == nil {
		var port int
		err := pool.QueryRow(ctx, `
			SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			 WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1 AND l.objid = $2 AND l.objsubid = $3`,
			classID, objID, objSubID).Scan(&port)
		if err == nil {
			for _, r := range d.c.Replicas {
				if r.Proc != nil && failpoint.OwnsLocalPort(r.Proc.Pid(), port) {
					victim = r
					break
				}
			}
		}
		if victim == nil {
			if time.Now().After(deadline) {
				return "", fmt.Errorf("no replica held product %d's line for 5 s (last: %v)", product, err)
			}
			if err := clock.Sleep(ctx, 20*time.Millisecond); err != nil {
				return "", err
			}
		}
	}
	d.event("SIGSTOP %s, which drains the line, for %v", victim.Name, pause)
	stopped := d.rec.Now()
	victim.Proc.Signal(syscall.SIGSTOP)
	err := clock.Sleep(ctx, pause)
	victim.Proc.Signal(syscall.SIGCONT)
	d.faultWindow(stopped)
	d.event("SIGCONT %s", victim.Name)
	return victim.Name, err
}
