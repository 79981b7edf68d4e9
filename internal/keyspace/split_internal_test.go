package keyspace

import (
	"slices"
	"testing"
)

// TestSplit counts lock spaces: replicas share one when their tokens have one in common, also
// through a third (a Redlock replica that has not reached every node), and not otherwise.
func TestSplit(t *testing.T) {
	r := func(id string, space ...string) Replica { return Replica{ID: id, Space: space} }
	tests := []struct {
		name       string
		self       Replica
		running    []Replica
		wantSpaces int
		wantOthers []string
	}{
		{"alone", r("a", "t1"), []Replica{r("a", "t1")}, 1, nil},
		{"one redis", r("a", "t1"), []Replica{r("a", "t1"), r("b", "t1"), r("c", "t1")}, 1, nil},
		{"two prefixes", r("a", "t1"), []Replica{r("a", "t1"), r("b", "t2"), r("c", "t1")}, 2, []string{"b"}},
		{"this one is the odd one", r("a", "t2"), []Replica{r("a", "t2"), r("b", "t1"), r("c", "t1")}, 2, []string{"b", "c"}},
		{"redlock, a node down for one", r("a", "n1", "n2", "n3"), []Replica{r("b", "n1", "n3"), r("c", "n2")}, 1, nil},
		{"redlock, joined through a third", r("a", "n1"), []Replica{r("b", "n2"), r("c", "n1", "n2")}, 1, nil},
		{"redlock, two prefixes", r("a", "n1", "n2", "n3"), []Replica{r("b", "m1", "m2", "m3")}, 2, []string{"b"}},
		{"three spaces", r("a", "t1"), []Replica{r("b", "t2"), r("c", "t3"), r("d", "t2")}, 3, []string{"b", "c", "d"}},
		{"self not yet recorded", r("a", "t1"), nil, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spaces, others := split(tt.self, tt.running)
			var ids []string
			for _, o := range others {
				ids = append(ids, o.ID)
			}
			if spaces != tt.wantSpaces || !slices.Equal(ids, tt.wantOthers) {
				t.Errorf("split = %d, %v; want %d, %v", spaces, ids, tt.wantSpaces, tt.wantOthers)
			}
		})
	}
}
