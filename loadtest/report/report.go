// Package report holds the figures and wordings the modes' reports share.
package report

import (
	"fmt"
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
