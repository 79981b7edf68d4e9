package opening

import (
	"fmt"
	"math/big"
)

// FairChance is the probability that a fair random draw of units winners among polite+scripts
// buyers (every buyer equally likely, each winning at most once: a hypergeometric draw) gives
// the polite buyers a chance of winning between 0.8× and 1.25× the scripts' — the bound issue
// #33's fairness acceptance holds the line to. It is computed exactly, over rationals: the
// crowd sizes of a run are picked from it so that a line that is a fair draw passes in at least
// 19 runs of 20, and a failed run says the line is not one.
//
// With X polite winners the ratio is (X/polite) / ((units−X)/scripts); a draw where no script
// wins has no ratio and counts as outside the bound (unless nobody won at all, which no crowd
// of the harness allows: units ≥ 1).
func FairChance(polite, scripts, units int) (float64, error) {
	n := polite + scripts
	if polite < 1 || scripts < 1 || units < 1 || units > n {
		return 0, fmt.Errorf("fair chance of %d polite, %d scripts, %d units: want positive crowds and 1 ≤ units ≤ buyers", polite, scripts, units)
	}
	inside := new(big.Int)
	for x := max(0, units-scripts); x <= min(units, polite); x++ {
		if !withinBound(x, polite, scripts, units) {
			continue
		}
		ways := new(big.Int).Binomial(int64(polite), int64(x))
		ways.Mul(ways, new(big.Int).Binomial(int64(scripts), int64(units-x)))
		inside.Add(inside, ways)
	}
	p, _ := new(big.Rat).SetFrac(inside, new(big.Int).Binomial(int64(n), int64(units))).Float64()
	return p, nil
}

// withinBound reports whether x polite winners of units put the polite buyers' chance between
// 0.8× and 1.25× the scripts' — in integers: 4·polite·(units−x) ≤ 5·x·scripts and
// 4·x·scripts ≤ 5·polite·(units−x).
func withinBound(x, polite, scripts, units int) bool {
	sw := units - x
	if sw == 0 {
		return false
	}
	a, b := int64(x)*int64(scripts), int64(polite)*int64(sw)
	return 4*b <= 5*a && 4*a <= 5*b
}

// Ratio is a polite buyer's chance of winning over a script's, from the winners of each
// group; 0 when no script won (reported as such, and outside the bound).
func Ratio(politeWins, polite, scriptWins, scripts int) float64 {
	if scriptWins == 0 || polite == 0 || scripts == 0 {
		return 0
	}
	return (float64(politeWins) / float64(polite)) / (float64(scriptWins) / float64(scripts))
}
