package faults

import (
	"strings"
	"testing"
	"time"
)

// TestReadsWhileRedisHung judges made-up reads: each must be answered 200, within the budget,
// before Redis came back.
func TestReadsWhileRedisHung(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	quick := func(at int) hangRead { return hangRead{sent: ms(at), answered: ms(at + 20), status: 200} }
	resumed := ms(4000)
	cases := []struct {
		name  string
		reads []hangRead
		ok    bool
	}{
		{"every read answered", []hangRead{quick(200), quick(400), quick(600), quick(800), quick(1000)}, true},
		{"one answered once Redis was back", []hangRead{quick(200), quick(400), quick(600), quick(800),
			{sent: ms(1000), answered: ms(4001), status: 200}}, false},
		{"one timed out", []hangRead{quick(200), quick(400), quick(600), quick(800),
			{sent: ms(1000), answered: ms(4000), err: "timeout"}}, false},
		{"one answered 503", []hangRead{quick(200), quick(400), quick(600), quick(800),
			{sent: ms(1000), answered: ms(1100), status: 503}}, false},
		{"too few sent", []hangRead{quick(200), quick(400)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := &drillEnv{hang: &hangProbe{reads: c.reads, resumed: resumed}}
			failed, notes := readsWhileRedisHung(d, nil, availability{})
			if (len(failed) == 0) != c.ok {
				t.Errorf("failed %q, notes %q; want ok = %v", failed, notes, c.ok)
			}
			if all := strings.Join(append(failed, notes...), ""); !strings.Contains(all, "product reads sent while Redis was stopped") {
				t.Errorf("no summary of the reads: %q", all)
			}
		})
	}
	if failed, _ := readsWhileRedisHung(&drillEnv{}, nil, availability{}); len(failed) != 1 {
		t.Errorf("no reads at all passed: %q", failed)
	}
}
