// Package faults holds the fault drills (-fault) and the asynchronous sale (-async): a sale
// through the balancer over the replicas (package cluster), a fault injected while it sells
// (faults.go: one scenario per fault), and the judgement of everything the clients were told
// — linearizability against the model of the stock (package model) and the SQL verdict
// (package verdict). drill.go is a drill's world, drillrun.go runs one drill in named
// steps, drillreport.go reports them; the clients are package client's, the load package
// traffic's, the proxies package failpoint's, the pages package report's.
package faults

import (
	"context"
	"fmt"

	"github.com/stocksvc/stocksvc/loadtest/env"
)

// harness is the invocation's shared state, which the drills and the asynchronous sale
// extend with methods of their own.
type harness struct{ *env.Harness }

// Drills runs every scenario o.Fault picks o.Runs times, reports each run and a table of all
// of them (also written to drills.md), and returns env.ErrFailed unless every run passed.
func Drills(ctx context.Context, h *env.Harness, o DrillOptions) error {
	return (&harness{h}).drills(ctx, o)
}

// Recheck checks the history o.Recheck names again, with o's model settings, and returns
// env.ErrFailed when it is not linearizable.
func Recheck(h *env.Harness, o DrillOptions) error {
	return (&harness{h}).recheck(o.Recheck, o.plan())
}

// Async runs the asynchronous sale (-async) and reports it; env.ErrFailed when a check
// failed.
func Async(ctx context.Context, h *env.Harness, o AsyncOptions) error {
	return (&harness{h}).asyncSale(ctx, o)
}

// CheckScenarios refuses a -fault list that names an unknown scenario, and, with Redlock
// nodes (redlock > 0), one that stops or proxies the one Redis, which a Redlock run does not
// have.
func CheckScenarios(spec string, redlock int) error {
	picked, err := pickScenarios(spec)
	if err != nil {
		return err
	}
	for _, sc := range picked {
		if redlock > 0 && (sc.ownRedis || sc.proxyRedis || sc.sentinel) {
			return fmt.Errorf("-redlock: drill %s stops or proxies the one Redis, which a Redlock run does not have", sc.name)
		}
	}
	return nil
}
