// Package failpoint is the mechanisms the fault drills inject faults with, apart from the
// drills that use them (package faults): a toxiproxy proxy run inside the harness between one
// replica and Postgres or Redis (latency, silence), the commit cut that severs a Postgres
// connection at the moment the server has committed, and which process owns a socket (to find
// who holds a connection before pausing it). Killing, pausing and restarting the servers
// themselves is package cluster's (Proc.Signal, Stop, Start).
package failpoint

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
)

// Proxy is a toxiproxy proxy run inside the harness (no toxiproxy server, no API port):
// it stands between one replica and Postgres or Redis, so that a fault hits that replica's
// connections only.
type Proxy struct {
	proxy *toxiproxy.Proxy
	Cut   *CommitCut // installed on Postgres proxies from the start, disarmed
}

// NewProxy starts a proxy named name to upstream (host:port) on a loopback port of its own;
// with watchCommits, a disarmed commit cut (Cut) sits on what the server sends.
func NewProxy(name, upstream string, watchCommits bool) (*Proxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("start proxy %s to %s: %w", name, upstream, err)
	}
	t := &Proxy{proxy: p}
	if watchCommits {
		// Toxiproxy makes toxics by type name from its own registry; registering the same type
		// again is harmless.
		toxics.Register(commitCutType, new(CommitCut))
		w, err := p.Toxics.AddToxicJson(strings.NewReader(`{"name":"commit_cut","type":"` + commitCutType + `","stream":"downstream"}`))
		if err != nil {
			p.Stop()
			return nil, fmt.Errorf("add commit cut to %s: %w", name, err)
		}
		t.Cut = w.Toxic.(*CommitCut)
	}
	return t, nil
}

// Addr is where the replica connects instead of the server.
func (t *Proxy) Addr() string { return t.proxy.Listen }

// Add installs a toxic given in toxiproxy's JSON form.
func (t *Proxy) Add(toxicJSON string) error {
	if _, err := t.proxy.Toxics.AddToxicJson(strings.NewReader(toxicJSON)); err != nil {
		return fmt.Errorf("add toxic %s: %w", toxicJSON, err)
	}
	return nil
}

// Clear removes every toxic but the (disarmed) commit cut.
func (t *Proxy) Clear(ctx context.Context) {
	for _, name := range []string{"latency", "silence_up", "silence_down"} {
		_ = t.proxy.Toxics.RemoveToxic(ctx, name)
	}
}

// Stop closes the proxy and every connection through it.
func (t *Proxy) Stop() { t.proxy.Stop() }

const commitCutType = "stocksvc_commit_cut"

// CommitCut watches what Postgres sends a client and, while armed, cuts the connection at a
// commit with the given probability: the moment the server has committed (CommandComplete
// COMMIT, or an INSERT/UPDATE/DELETE in an implicit transaction, followed by ReadyForQuery
// idle) and the client has not heard it yet. The client then cannot know whether its order
// was taken — the hardest case for "never lose an order, never sell twice". It recognises the
// moment from the protocol, not from the service's SQL, so it works whatever statements the
// purchase path uses.
type CommitCut struct {
	armed       atomic.Bool
	probability atomic.Uint64 // in millionths
	commits     atomic.Int64  // commit points seen while armed
	cuts        atomic.Int64
	// onCommit, when set, is called once, at the next commit point of any connection, before
	// the server's answer is passed on; the connection is then cut. (kill-replica-rush kills
	// the replica there: its write committed, its answers never sent.)
	onCommit atomic.Pointer[func()]
}

// AtNextCommit has f called at the next commit point, in place of passing it on.
func (c *CommitCut) AtNextCommit(f func()) { c.onCommit.Store(&f) }

// Arm has the cut sever connections at a commit with probability (0 to 1).
func (c *CommitCut) Arm(probability float64) {
	c.probability.Store(uint64(probability * 1e6))
	c.armed.Store(true)
}

// Disarm stops cutting; the counts stay.
func (c *CommitCut) Disarm() { c.armed.Store(false) }

// CancelNextCommit withdraws what AtNextCommit gave; false when a commit point came first
// (the function has run, or is running).
func (c *CommitCut) CancelNextCommit() bool { return c.onCommit.Swap(nil) != nil }

// Commits is how many commit points the cut saw while armed, Cuts how many it severed.
func (c *CommitCut) Commits() int64 { return c.commits.Load() }

// Cuts is how many connections the cut severed at a commit point.
func (c *CommitCut) Cuts() int64 { return c.cuts.Load() }

// NewState makes each connection's protocol reader (toxics.StatefulToxic).
func (c *CommitCut) NewState() any { return new(pgWatch) }

// Pipe forwards the server's bytes, and cuts at a commit point when the dice say so.
func (c *CommitCut) Pipe(stub *toxics.ToxicStub) {
	w, _ := stub.State.(*pgWatch)
	if w == nil {
		w = new(pgWatch)
		stub.State = w
	}
	for {
		select {
		case <-stub.Interrupt:
			return
		case chunk := <-stub.Input:
			if chunk == nil {
				stub.Close()
				return
			}
			if !w.feed(chunk.Data) {
				stub.Output <- chunk
				continue
			}
			if f := c.onCommit.Swap(nil); f != nil {
				(*f)()
				c.cutAndDrain(stub)
				return
			}
			if c.armed.Load() {
				c.commits.Add(1)
				if rand.Float64()*1e6 < float64(c.probability.Load()) {
					c.cuts.Add(1)
					c.cutAndDrain(stub)
					return
				}
			}
			stub.Output <- chunk
		}
	}
}

// cutAndDrain closes the connection, and keeps reading what the server still sends, so the
// proxy's reader never blocks.
func (c *CommitCut) cutAndDrain(stub *toxics.ToxicStub) {
	stub.Close()
	for {
		select {
		case <-stub.Interrupt:
			return
		case more := <-stub.Input:
			if more == nil {
				return
			}
		}
	}
}

// pgWatch follows the Postgres backend protocol across chunks: each message is a type byte,
// a big-endian length that counts itself, and a body.
type pgWatch struct {
	header [5]byte
	have   int // header bytes read so far
	left   int // body bytes still to come
	body   []byte
	wrote  bool // a write completed since the last ReadyForQuery
}

// feed reads data and reports whether it holds a commit point.
func (w *pgWatch) feed(data []byte) bool {
	commit := false
	for len(data) > 0 {
		if w.have < 5 {
			n := copy(w.header[w.have:], data)
			w.have += n
			data = data[n:]
			if w.have < 5 {
				break
			}
			w.left = int(binary.BigEndian.Uint32(w.header[1:])) - 4
			w.body = w.body[:0]
		}
		n := min(w.left, len(data))
		if (w.header[0] == 'C' || w.header[0] == 'Z') && len(w.body) < 64 {
			w.body = append(w.body, data[:min(n, 64-len(w.body))]...)
		}
		w.left -= n
		data = data[n:]
		if w.left > 0 {
			break
		}
		switch w.header[0] {
		case 'C':
			tag := string(w.body)
			switch {
			case strings.HasPrefix(tag, "ROLLBACK"):
				w.wrote = false
			case strings.HasPrefix(tag, "INSERT"), strings.HasPrefix(tag, "UPDATE"), strings.HasPrefix(tag, "DELETE"):
				w.wrote = true
			}
		case 'Z':
			if len(w.body) == 1 && w.body[0] != 'T' {
				if w.body[0] == 'I' && w.wrote {
					commit = true
				}
				w.wrote = false
			}
		}
		w.have = 0
	}
	return commit
}
