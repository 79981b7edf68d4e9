// Package traffic is the load the harness's modes put on a deployment, apart from the modes
// that judge it: the drills' mix of operations at a rate and their closed-loop buyers (Mix,
// Rush, on package client), the seeded randomness a run's choices come from (Rand), and the
// physical anchor every comparison is measured against (PGBench: pgbench's bare conditional
// decrement), which the sale's -compare and the benchmarks' -throughput both run, so that
// neither mode imports the other.
package traffic

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/report"
)

// Anchor is what one pgbench run measured.
type Anchor struct {
	Clients   int
	TPS       float64   // transactions per second, each one sale
	Latencies []float64 // per transaction, ms
	P99       float64   // ms
}

// SellOut is how long selling stock units would take at the anchor's rate; zero when it sold
// nothing.
func (a Anchor) SellOut(stock int) time.Duration {
	if a.TPS <= 0 {
		return 0
	}
	return time.Duration(float64(stock) / a.TPS * float64(time.Second))
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// PGBench measures the physical floor: pgbench running the bare single-row conditional
// decrement with clients clients on the Postgres server serverURL points at (a database of its
// own is made there and dropped), with no service, lock or HTTP in the way. A multi-host URL,
// which libpq reads as pgx does, reaches an HA cluster's primary. Its files go to h.Out's
// d-pgbench.
func PGBench(ctx context.Context, h *env.Harness, serverURL string, clients int) (Anchor, error) {
	pgbench, err := cluster.FindTool(ctx, "pgbench", "postgresql-client", h.W)
	if err != nil {
		return Anchor{}, err
	}
	dir := filepath.Join(h.Out, "d-pgbench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Anchor{}, err
	}
	name := fmt.Sprintf("stocksvc_load_%d_pgbench", time.Now().Unix())
	dbURL, err := cluster.CreateDatabase(ctx, serverURL, name)
	if err != nil {
		return Anchor{}, err
	}
	defer func() {
		if err := cluster.DropDatabase(serverURL, name); err != nil {
			h.Printf("  warning: %v\n", err)
		}
	}()
	psql := func(sql string) error {
		out, err := exec.CommandContext(ctx, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql, dbURL).CombinedOutput()
		if err != nil {
			return fmt.Errorf("psql: %v: %s", err, out)
		}
		return nil
	}
	// Enough stock that it never runs out during the run, so every transaction is a sale.
	if err := psql(`CREATE TABLE bench_stock (id int PRIMARY KEY, stock bigint NOT NULL CHECK (stock >= 0));
	                INSERT INTO bench_stock VALUES (1, 1000000000000)`); err != nil {
		return Anchor{}, err
	}
	script := filepath.Join(dir, "decrement.sql")
	if err := os.WriteFile(script, []byte("UPDATE bench_stock SET stock = stock - 1 WHERE id = 1 AND stock > 0;\n"), 0o644); err != nil {
		return Anchor{}, err
	}
	const seconds = 10
	h.Printf("[d-pgbench] pgbench -c %d -T %d: bare UPDATE ... WHERE stock > 0 on one row\n", clients, seconds)
	cmd := exec.CommandContext(ctx, pgbench, "-n", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)),
		"-T", strconv.Itoa(seconds), "-f", script, "-l", "--log-prefix", filepath.Join(dir, "latency"), dbURL)
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(dir, "pgbench.log"), out, 0o644)
	if err != nil {
		return Anchor{}, fmt.Errorf("pgbench: %v: %s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return Anchor{}, fmt.Errorf("pgbench printed no tps line: %s", out)
	}
	tps, _ := strconv.ParseFloat(string(m[1]), 64)
	latencies, err := pgbenchLatencies(dir)
	if err != nil {
		return Anchor{}, err
	}
	return Anchor{Clients: clients, TPS: tps, Latencies: latencies, P99: report.Percentile(latencies, 99)}, nil
}

// pgbenchLatencies reads the per-transaction logs (third field: latency in µs) as ms.
func pgbenchLatencies(dir string) ([]float64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "latency.*"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("pgbench wrote no transaction log in %s", dir)
	}
	var out []float64
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			us, err := strconv.ParseFloat(f[2], 64)
			if err == nil {
				out = append(out, us/1000)
			}
		}
	}
	return out, nil
}
