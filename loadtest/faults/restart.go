package faults

import (
	"fmt"
	"slices"
	"strings"

	"github.com/stocksvc/stocksvc/loadtest/model"
)

// failedDuring counts the attempts that overlap one of the fault windows, and those of them
// with no answer or a 5xx (by kind, as describeFailure names them). rolling-restart holds the
// restart to these: a request failed while no replica was being restarted (a read that gave up
// after its second on a starved machine, say) is no failure of the restart, and the scenario's
// rule was only ever about the restart; those are noted instead.
func failedDuring(ops []*model.Op, faults []window) (attempts, failed int, kinds string) {
	byKind := map[string]int{}
	for _, p := range ops {
		if p.Final || p.In.Kind == model.KindCreate {
			continue
		}
		for _, at := range p.Attempts {
			if !slices.ContainsFunc(faults, func(w window) bool { return at.Start <= w.end && at.End >= w.start }) {
				continue
			}
			attempts++
			if at.Status == 0 || at.Status >= 500 {
				failed++
				byKind[describeFailure(at)]++
			}
		}
	}
	var ks []string
	for k, n := range byKind {
		ks = append(ks, fmt.Sprintf("%d× %s", n, k))
	}
	slices.Sort(ks)
	return attempts, failed, strings.Join(ks, ", ")
}
