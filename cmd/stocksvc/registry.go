package main

import (
	"regexp"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// registry is the Prometheus registry /metrics serves. It also remembers the name of every
// metric registered on it, including those with no sample yet — a vector no label value was
// set on, a collector that reports only while there is something to report (the age of the
// oldest pending order) — which a Gather would leave out: the names are what
// deploy/grafana's dashboard test holds the dashboard's queries to.
type registry struct {
	*prometheus.Registry
	mu    sync.Mutex
	names map[string]struct{}
}

func newRegistry() *registry {
	return &registry{Registry: prometheus.NewRegistry(), names: map[string]struct{}{}}
}

// Register registers c and remembers the names it describes.
func (r *registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	descs := make(chan *prometheus.Desc)
	go func() {
		c.Describe(descs)
		close(descs)
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range descs {
		// Desc has no accessor for its name; its String form is stable and quotes it.
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = struct{}{}
		}
	}
	return nil
}

// MustRegister registers each collector, and panics on the first that cannot be, as
// prometheus.Registry does.
func (r *registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// metricNames returns the names of the metrics registered, sorted.
func (r *registry) metricNames() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.names))
	for n := range r.names {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)
