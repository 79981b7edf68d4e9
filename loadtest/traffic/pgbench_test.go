package traffic

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestPGBenchLatenciesReadsEveryLogInMilliseconds(t *testing.T) {
	dir := t.TempDir()
	// pgbench -l writes one file per thread: client, transaction, latency in µs, ...
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("latency.1", "0 1 1500 0 1700000000 1\n0 2 2500 0 1700000000 2\n")
	write("latency.1.1", "1 1 500 0 1700000000 3\n\n")
	got, err := pgbenchLatencies(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []float64{0.5, 1.5, 2.5}; !slices.Equal(got, want) {
		t.Fatalf("latencies = %v, want %v", got, want)
	}
}

func TestPGBenchLatenciesWithoutLogIsAnError(t *testing.T) {
	if _, err := pgbenchLatencies(t.TempDir()); err == nil {
		t.Fatal("no transaction log: want an error")
	}
}

func TestAnchorSellOut(t *testing.T) {
	if got := (Anchor{TPS: 200}).SellOut(100); got != 500*time.Millisecond {
		t.Fatalf("SellOut(100) at 200 tx/s = %v, want 500ms", got)
	}
	if got := (Anchor{}).SellOut(100); got != 0 {
		t.Fatalf("SellOut at 0 tx/s = %v, want 0 (never sells out)", got)
	}
}
