package line_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sort"
	"testing"

	"github.com/stocksvc/stocksvc/internal/line"
)

// TestRankFollowsTheFormula: the order is the one DrawFormula states, computed here from its
// words (SHA-256 of the seed and the id as 8 bytes big-endian), so that anyone holding the
// seed can show it.
func TestRankFollowsTheFormula(t *testing.T) {
	t.Parallel()
	seed := []byte("a seed of thirty-two bytes, fixed")[:32]
	ids := []int64{42, 7, 1000, 3, 99, 1 << 40}
	want := slices.Clone(ids)
	key := func(id int64) []byte {
		b := binary.BigEndian.AppendUint64(slices.Clone(seed), uint64(id))
		sum := sha256.Sum256(b)
		return sum[:]
	}
	sort.Slice(want, func(i, j int) bool { return bytes.Compare(key(want[i]), key(want[j])) < 0 })
	if got := line.Rank(seed, ids); !slices.Equal(got, want) {
		t.Errorf("Rank = %v, want %v", got, want)
	}
}

// TestRankIsAPermutationFromTheSeed: every ticket of the draw is in it once, whatever order
// the store lists them in; the same seed gives the same order, another seed another.
func TestRankIsAPermutationFromTheSeed(t *testing.T) {
	t.Parallel()
	ids := make([]int64, 500)
	for i := range ids {
		ids[i] = int64(i*3 + 1)
	}
	seed := line.NewSeed()
	first := line.Rank(seed, ids)
	shuffled := slices.Clone(ids)
	slices.Reverse(shuffled)
	if again := line.Rank(seed, shuffled); !slices.Equal(first, again) {
		t.Error("the same seed over the same tickets listed in another order gave another order")
	}
	sorted := slices.Clone(first)
	slices.Sort(sorted)
	if !slices.Equal(sorted, ids) {
		t.Error("the draw is not a permutation of its tickets")
	}
	if slices.Equal(line.Rank(line.NewSeed(), ids), first) {
		t.Error("two seeds drew the same order of 500 tickets")
	}
	if slices.Equal(first, ids) {
		t.Error("the draw kept the arrival order")
	}
}

// TestRankIsUnbiased: over many seeds, each ticket lands in each place about equally often —
// the first ticket to join, or the one with the smallest id, has no edge. 10 tickets, 20 000
// draws: each (ticket, place) cell expects 2 000; a chi-square over the 100 cells stays far
// below what a biased draw gives (its 0.1 % critical value at 81 degrees of freedom is 126).
func TestRankIsUnbiased(t *testing.T) {
	t.Parallel()
	const n, draws = 10, 20_000
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	var counts [n][n]float64
	for range draws {
		for place, id := range line.Rank(line.NewSeed(), ids) {
			counts[id-1][place]++
		}
	}
	expected := float64(draws) / n
	var chi2 float64
	for _, row := range counts {
		for _, c := range row {
			chi2 += (c - expected) * (c - expected) / expected
		}
	}
	if chi2 > 126 {
		t.Errorf("chi-square %.1f over %d cells: the places are not uniform", chi2, n*n)
	}
}
