package identity

import (
	"crypto/sha256"
	"fmt"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// The bounds of what a Verifier remembers (Config.Remember, Config.RememberRefused).
const (
	// DefaultRemember is how many verified tokens a Verifier remembers: a customer per entry
	// for as long as the token lives, about 200 bytes each (some 20 MB when full).
	DefaultRemember = 100_000
	// DefaultRememberRefused is how many refused tokens it remembers, apart from the verified
	// ones so that a flood of refusals cannot push a buyer's token out.
	DefaultRememberRefused = 10_000
)

// tokenSum is what a token is remembered by: its SHA-256, so that memory holds no credential
// and every entry is the same small size whatever the token's length.
type tokenSum [sha256.Size]byte

// accepted is a token verified before, good until its exp plus the leeway.
type accepted struct {
	customer string
	until    time.Time
	ring     *keyring // the keys it was verified with
}

// refused is a token refused after its signature was checked, with the refusal to answer
// again. It holds until the keys change (ring), and, when the token could become valid
// (not yet valid), until that time.
type refused struct {
	err   error
	until time.Time // zero: for as long as the keys are ring
	ring  *keyring
}

// memory is the Verifier's memory of its judgements: two bounded LRU caches, safe for
// concurrent use. Refusals live in a cache of their own so that a stream of them evicts
// only other refusals.
type memory struct {
	accepted *lru.Cache[tokenSum, accepted]
	refused  *lru.Cache[tokenSum, refused]
	metrics  *metrics
}

func newMemory(size, refusedSize int, m *metrics) *memory {
	acc, err := lru.New[tokenSum, accepted](size)
	if err != nil {
		panic(err) // sizes are positive: Config.withDefaults
	}
	ref, err := lru.New[tokenSum, refused](refusedSize)
	if err != nil {
		panic(err)
	}
	mem := &memory{accepted: acc, refused: ref, metrics: m}
	m.entries(func() float64 { return float64(acc.Len()) }, func() float64 { return float64(ref.Len()) })
	return mem
}

// judgement is what was concluded of a token: its customer, or the refusal.
type judgement struct {
	customer string
	err      error
}

// recall returns what was concluded of a token remembered as verified or refused, judged
// with ring's keys at now; ok is false when nothing still holds. A verified token past its
// exp is remembered as refused from then on.
func (m *memory) recall(sum tokenSum, ring *keyring, now time.Time) (j judgement, ok bool) {
	if a, hit := m.accepted.Get(sum); hit && a.ring == ring {
		if now.Before(a.until) {
			return judgement{customer: a.customer}, true
		}
		m.accepted.Remove(sum)
		m.refuse(sum, refused{err: errExpiredSince, ring: ring})
		return judgement{err: errExpiredSince}, true
	}
	if r, hit := m.refused.Get(sum); hit && r.ring == ring {
		if r.until.IsZero() || now.Before(r.until) {
			return judgement{err: r.err}, true
		}
		m.refused.Remove(sum)
	}
	return judgement{}, false
}

// errExpiredSince is the refusal of a token that was verified and has expired since.
var errExpiredSince = fmt.Errorf("%w: past its exp since it was verified", ErrExpired)

func (m *memory) accept(sum tokenSum, a accepted) {
	if m.accepted.Add(sum, a) {
		m.metrics.evicted.WithLabelValues("verified").Inc()
	}
}

func (m *memory) refuse(sum tokenSum, r refused) {
	if m.refused.Add(sum, r) {
		m.metrics.evicted.WithLabelValues("refused").Inc()
	}
}

// forget drops everything: the keys changed, and with them what every judgement rested on.
func (m *memory) forget() {
	m.accepted.Purge()
	m.refused.Purge()
	m.metrics.purges.Inc()
}

// metrics are the Verifier's: how each token was judged, and what its memory holds.
type metrics struct {
	reg     prometheus.Registerer
	checks  *prometheus.CounterVec
	evicted *prometheus.CounterVec
	purges  prometheus.Counter
}

// The label values of stocksvc_customer_tokens_total.
const (
	sourceMemory    = "memory"    // remembered: no signature checked
	sourceSignature = "signature" // the signature was checked
	sourcePrecheck  = "precheck"  // refused before any signature: size, shape, header, kid, alg
	outcomeAccepted = "accepted"
	outcomeRefused  = "refused"
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reg: reg,
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_customer_tokens_total",
			Help: "Customer tokens judged, by where the answer came from (memory, signature, precheck) and outcome (accepted, refused).",
		}, []string{"source", "outcome"}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_customer_token_memory_evictions_total",
			Help: "Remembered customer tokens dropped to make room, by kind (verified, refused).",
		}, []string{"kind"}),
		purges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_customer_token_memory_purges_total",
			Help: "Times the remembered customer tokens were all forgotten because the signing keys changed.",
		}),
	}
	for _, source := range []string{sourceMemory, sourceSignature} {
		m.checks.WithLabelValues(source, outcomeAccepted)
		m.checks.WithLabelValues(source, outcomeRefused)
	}
	m.checks.WithLabelValues(sourcePrecheck, outcomeRefused)
	if reg != nil {
		reg.MustRegister(m.checks, m.evicted, m.purges)
	}
	return m
}

// entries registers the gauges of what the memory holds.
func (m *metrics) entries(verified, refused func() float64) {
	if m.reg == nil {
		return
	}
	entries := func(kind string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "stocksvc_customer_token_memory_entries",
			Help:        "Customer tokens remembered, by kind (verified, refused).",
			ConstLabels: prometheus.Labels{"kind": kind},
		}, f)
	}
	m.reg.MustRegister(entries("verified", verified), entries("refused", refused))
}

func (m *metrics) judged(source, outcome string) { m.checks.WithLabelValues(source, outcome).Inc() }
