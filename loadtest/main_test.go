package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/benchmarks"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/faults"
)

func TestParseOptions(t *testing.T) {
	t.Parallel()
	o, err := parseOptions(nil, io.Discard)
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if _, err := parseOptions([]string{"-redlock", "5", "-fault", "restart-redlock-node,kill-replica"}, io.Discard); err != nil {
		t.Errorf("a Redlock drill: %v", err)
	}
	if op, err := parseOptions([]string{"-opening", "-opening-limit", "1"}, io.Discard); err != nil || op.mode != modeOpening || op.opening.Limit != 1 {
		t.Errorf("-opening: mode %v, limit %d, %v", op.mode, op.opening.Limit, err)
	}
	if hs, err := parseOptions([]string{"-holds", "-hold-for", "2s", "-pay", "0.5", "-stock", "40"}, io.Discard); err != nil || hs.mode != modeHolds ||
		hs.holds.HoldFor != 2*time.Second || hs.holds.Pay != 0.5 || hs.holds.Cancel != 0.1 || hs.holds.Stock != 40 {
		t.Errorf("-holds: %+v, %v", hs.holds, err)
	}
	if s, err := parseOptions([]string{"-customer-auth", "body"}, io.Discard); err != nil || s.sale.CustomerAuth != "body" {
		t.Errorf("-customer-auth body: %q, %v", s.sale.CustomerAuth, err)
	}
	if d, err := parseOptions([]string{"-fault", "burst", "-rules=false"}, io.Discard); err != nil || !d.drills.NoRules {
		t.Errorf("-rules=false: no rules %v, %v", d.drills.NoRules, err)
	}
	root, err := cluster.RepositoryRoot()
	if err != nil {
		t.Fatal(err)
	}
	if o.mode != modeSale || o.cluster.Replicas != 3 || o.cluster.Defense != env.DefaultDefense || o.sale.KillAfter != 0 ||
		o.sale.CustomerAuth != "token" ||
		!strings.HasPrefix(o.out, filepath.Join(root, "loadtest", "out")) ||
		o.script != filepath.Join(root, "loadtest", "flashsale.js") {
		t.Errorf("defaults = %+v", o)
	}
	if _, err := os.Stat(o.script); err != nil {
		t.Errorf("default k6 script: %v", err)
	}
	bad := [][]string{
		{"-replicas", "0"},
		{"-duration", "2s"},
		{"-duration", "10s", "-kill-after", "10s"},
		{"-replicas", "1", "-kill-after", "5s"},
		{"-stock", "0"},
		{"extra"},
		{"-fault", "unplug-the-datacentre"},
		{"-fault", "burst", "-replicas", "1"},
		{"-fault", "burst", "-drill-rate", "0"},
		{"-fault", "burst", "-runs", "0"},
		{"-redlock", "2"},                              // a Redlock of two survives no loss
		{"-redlock", "3", "-fault", "restart-redis"},   // no one Redis to restart
		{"-redlock", "3", "-fault", "redis-partition"}, // nor to proxy
		{"-redlock", "3", "-compare"},
		{"-opening", "-opening-lead", "5s"}, // no room for the phases before the opening
		{"-opening", "-opening-limit", "0"},
		{"-opening", "-fault", "burst"},
		{"-holds", "-hold-for", "1500ms"}, // hold_for is whole seconds
		{"-holds", "-hold-for", "2h"},     // and at most an hour
		{"-holds", "-pay", "0.8", "-cancel", "0.3"},
		{"-holds", "-async"},
		{"-customer-auth", "jwt"},
	}
	for _, args := range bad {
		if _, err := parseOptions(args, io.Discard); err == nil {
			t.Errorf("parseOptions(%q) = nil error, want a refusal", args)
		}
	}
}

// TestParseOptionsCutsFlagsByMode: each mode gets the flags it reads, the deployment's go to
// the cluster's options, and the mode is the one the flags picked.
func TestParseOptionsCutsFlagsByMode(t *testing.T) {
	t.Parallel()
	o, err := parseOptions([]string{"-async", "-stock", "900", "-rate", "100", "-duration", "10s", "-kill-after", "3s",
		"-seed", "9", "-replicas", "4", "-lock-wait", "1s", "-keep"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	wantAsync := faults.AsyncOptions{Stock: 900, Rate: 100, Duration: 10 * time.Second, KillAfter: 3 * time.Second, Seed: 9,
		PauseFor: 20 * time.Second}
	if o.mode != modeAsync || o.async != wantAsync {
		t.Errorf("-async: mode %v, options %+v; want %v, %+v", o.mode, o.async, modeAsync, wantAsync)
	}
	if o.cluster.Replicas != 4 || o.cluster.LockWait != time.Second || !o.cluster.Keep || o.cluster.Defense != env.DefaultDefense {
		t.Errorf("-async: cluster options %+v", o.cluster)
	}

	o, err = parseOptions([]string{"-fault", "burst", "-runs", "2", "-seed", "5", "-drill-rate", "20", "-read-slack", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.mode != modeDrills || o.drills.Fault != "burst" || o.drills.Runs != 2 || o.drills.Seed != 5 || o.drills.Rate != 20 ||
		o.drills.ReadSlack != 0 || o.drills.LockTTL != 2*time.Second {
		t.Errorf("-fault: mode %v, options %+v", o.mode, o.drills)
	}

	o, err = parseOptions([]string{"-throughput", "-closed-only", "-clients", "64", "-duration", "5s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	wantThroughput := benchmarks.ThroughputOptions{Duration: 5 * time.Second, Clients: 64, ClosedOnly: true, PGBenchClients: 8, Rounds: 3}
	if o.mode != modeThroughput || o.throughput != wantThroughput {
		t.Errorf("-throughput: mode %v, options %+v; want %+v", o.mode, o.throughput, wantThroughput)
	}
	o, err = parseOptions([]string{"-throughput", "-reference", "-rounds", "5", "-postgres-ha"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !o.throughput.Reference || o.throughput.Rounds != 5 || !o.throughput.PostgresHA {
		t.Errorf("-throughput -reference -rounds 5 -postgres-ha: options %+v", o.throughput)
	}

	o, err = parseOptions([]string{"-recheck", "history.json", "-loose-sold-out"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.mode != modeRecheck || o.drills.Recheck != "history.json" || !o.drills.LooseSoldOut {
		t.Errorf("-recheck: mode %v, options %+v", o.mode, o.drills)
	}
}

func TestParseOptionsCache(t *testing.T) {
	t.Parallel()
	o, err := parseOptions([]string{"-cache"}, io.Discard)
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	want := benchmarks.CacheOptions{Duration: 30 * time.Second, Clients: 128, Rounds: 3, StampedeRounds: 10, StampedeReaders: 500}
	if o.mode != modeCache || o.cache != want || o.cluster.Replicas != 3 {
		t.Errorf("defaults = %+v", o)
	}
	for _, args := range [][]string{{"-cache", "-rounds", "0"}, {"-cache", "-stampede-readers", "0"}, {"-cache", "-stampede-rounds", "-1"}} {
		if _, err := parseOptions(args, io.Discard); err == nil {
			t.Errorf("parseOptions(%q) = nil error, want a refusal", args)
		}
	}
}

func TestFloodOptions(t *testing.T) {
	t.Parallel()
	o, err := parseOptions([]string{"-flood", "-flood-kinds", "audit,missing-ids"}, io.Discard)
	if err != nil {
		t.Fatalf("-flood: %v", err)
	}
	if o.mode != modeFlood || !o.flood.On || o.flood.Kinds != "audit,missing-ids" {
		t.Errorf("-flood: mode %v, options %+v", o.mode, o.flood)
	}
	for _, args := range [][]string{
		{"-flood", "-flood-kinds", "audit,tea"},
		{"-flood", "-flood-round", "500ms"},
		{"-flood", "-flood-rounds", "0"},
		{"-flood", "-flood-orders", "-1"},
		{"-flood", "-flood-rate", "-5"},
		{"-flood", "-cache"},
		{"-replays", "-flood"},
		{"-replays", "-replay-clients", "1"},
		{"-replays", "-fault", "burst"},
	} {
		if _, err := parseOptions(args, io.Discard); err == nil {
			t.Errorf("parseOptions(%q) = nil error, want a refusal", args)
		}
	}
	// Flags of a mode that is off are not judged.
	if _, err := parseOptions([]string{"-flood-rounds", "0"}, io.Discard); err != nil {
		t.Errorf("-flood-rounds 0 without -flood: %v", err)
	}
}
