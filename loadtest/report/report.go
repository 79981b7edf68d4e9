// Package report holds the figures and wordings the modes' reports share.
package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Statuses lists answers by status, 0 meaning none came.
func Statuses(byStatus map[int]int) string {
	statuses := make([]int, 0, len(byStatus))
	for st := range byStatus {
		statuses = append(statuses, st)
	}
	slices.Sort(statuses)
	var parts []string
	for _, st := range statuses {
		name := strconv.Itoa(st)
		if st == 0 {
			name = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", name, byStatus[st]))
	}
	return strings.Join(parts, ", ")
}

// Percentile is the nearest-rank p-th percentile of values (NaN for none).
func Percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	s := slices.Clone(values)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Ratio prints a ÷ b in bold, or n/a when b is zero or either is not a number.
func Ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "n/a"
	}
	return fmt.Sprintf("**%.2f×**", a/b)
}
