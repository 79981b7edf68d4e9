package line

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// SeedSize is the size of a draw's seed in bytes.
const SeedSize = 32

// DrawFormula says how a draw's places follow from its seed, as the admin route shows it.
const DrawFormula = "tickets joined before the draw, in ascending order of SHA-256(seed || ticket id as 8 bytes big-endian), ties by id, take places 1..n; later arrivals take n+1.. in ticket id order"

// NewSeed returns a draw's seed: SeedSize bytes from crypto/rand.
func NewSeed() []byte {
	seed := make([]byte, SeedSize)
	_, _ = rand.Read(seed) // crypto/rand.Read never fails (it panics if the system has none)
	return seed
}

// Rank orders the tickets ids of a draw by the seed: place i+1 is the ticket at index i of
// the result. Anyone holding the seed and the ids computes the same order (DrawFormula): each
// ticket's rank is SHA-256 of the seed followed by its id as 8 bytes big-endian; ties, which
// SHA-256 makes vanishingly unlikely, go by id.
func Rank(seed []byte, ids []int64) []int64 {
	type ranked struct {
		id  int64
		key [sha256.Size]byte
	}
	rs := make([]ranked, len(ids))
	buf := make([]byte, len(seed)+8)
	copy(buf, seed)
	for i, id := range ids {
		binary.BigEndian.PutUint64(buf[len(seed):], uint64(id))
		rs[i] = ranked{id: id, key: sha256.Sum256(buf)}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if c := bytes.Compare(a.key[:], b.key[:]); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.id
	}
	return out
}
