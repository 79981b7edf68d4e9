// Command lockbench compares package lock with bsm/redislock and go-redsync/redsync on a
// redis-server of its own (started on a free loopback port and stopped at the end), and prints
// the medians of several runs as Markdown for docs/benchmarks.md.
//
// Usage, from the bench module:
//
//	go run ./cmd/lockbench [-runs 3] [-duration 3s] [-workers 16,64] [-out file.md]
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/stocksvc/stocksvc/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lockbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runs := fs.Int("runs", 3, "how many times to run everything (the report gives medians)")
	ops := fs.Int("ops", 5000, "uncontended: obtain+release pairs per implementation and run")
	workersFlag := fs.String("workers", "16,64", "hot key: worker counts, comma-separated")
	hold := fs.Duration("hold", time.Millisecond, "hot key: critical section")
	duration := fs.Duration("duration", 3*time.Second, "hot key: time per implementation and worker count")
	hot := fs.String("hot", "", "hot key: contenders by name, comma-separated (default: the standard set)")
	outPath := fs.String("out", "", "also write the Markdown to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	workers, err := parseInts(*workersFlag)
	if err != nil {
		return fmt.Errorf("-workers: %w", err)
	}
	hotSet := bench.HotKeySet()
	if *hot != "" {
		catalog := bench.Catalog()
		hotSet = nil
		for name := range strings.SplitSeq(*hot, ",") {
			c, ok := catalog[strings.TrimSpace(name)]
			if !ok {
				return fmt.Errorf("-hot: no contender %q", name)
			}
			hotSet = append(hotSet, c)
		}
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	srv, err := bench.StartServer(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	version, err := srv.Version(ctx)
	if err != nil {
		return err
	}
	logger.Info("redis started", "addr", srv.Addr(), "version", version)

	cfg := bench.SuiteConfig{
		Runs: *runs, UncontendedOps: *ops, UncontendedCountOps: 500,
		Workers: workers, Hold: *hold, Duration: *duration,
		Uncontended: bench.UncontendedSet(), Hot: hotSet,
	}
	started := time.Now()
	results, err := bench.RunSuite(ctx, srv, cfg, func(s string) { logger.Info("case done", "case", s) })
	if err != nil {
		return err
	}
	logger.Info("suite done", "elapsed", time.Since(started).Round(time.Second))

	// The command as given, less -out: where the copy went is no part of the measurement.
	command := "go run ./cmd/lockbench"
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "out" {
			command += fmt.Sprintf(" -%s %s", f.Name, f.Value)
		}
	})
	var out strings.Builder
	if err := bench.WriteMarkdown(&out, cfg, results, environment(version), strings.TrimSpace(command)); err != nil {
		return err
	}
	if _, err := io.WriteString(stdout, out.String()); err != nil {
		return err
	}
	if *outPath != "" {
		if err := os.WriteFile(*outPath, []byte(out.String()), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *outPath, err)
		}
	}
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if n < 1 {
			return nil, errors.New("counts must be positive")
		}
		out = append(out, n)
	}
	return out, nil
}

// environment describes the machine and the versions measured.
func environment(redisVersion string) string {
	deps := map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			deps[d.Path] = d.Version
		}
	}
	return fmt.Sprintf("%d CPUs (GOMAXPROCS %d), %s; Redis %s on loopback; %s, bsm/redislock %s, go-redsync/redsync %s, go-redis %s; "+
		"internal/lock sources %s. The benchmark, its workers and Redis share the machine.",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), cpuModel(), redisVersion, runtime.Version(),
		deps["github.com/bsm/redislock"], deps["github.com/go-redsync/redsync/v4"], deps["github.com/redis/go-redis/v9"],
		lockFingerprint())
}

// lockFingerprint identifies the package lock that was measured: the start of a SHA-256 over
// its non-test sources, read from ../internal/lock (the bench module sits in the repository's
// bench directory, and its go.mod replaces the service module with ../).
func lockFingerprint() string {
	const dir = "../internal/lock"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "unknown (run from bench/ to fingerprint them)"
	}
	h := sha256.New()
	for _, e := range entries { // ReadDir sorts by name
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "unknown"
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
	}
	return "sha256 " + hex.EncodeToString(h.Sum(nil))[:12]
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
