package opening

import (
	"flag"
	"math"
	"math/big"
	"testing"
)

// TestFairChanceSmall checks the exact probability against an enumeration by hand: 2 polite
// buyers, 2 scripts, 2 units. The 6 equally likely pairs of winners give X polite winners
// 0 (1 pair), 1 (4 pairs), 2 (1 pair); only X=1 has a ratio, exactly 1.
func TestFairChanceSmall(t *testing.T) {
	t.Parallel()
	got, err := FairChance(2, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := 4.0 / 6.0; math.Abs(got-want) > 1e-12 {
		t.Errorf("FairChance(2, 2, 2) = %v, want %v", got, want)
	}
}

// TestFairChanceMatchesAnotherSum sums the same probability another way — every x, with its
// ratio computed in floating point — for crowds the harness uses, and checks that the bound's
// edges count as inside.
func TestFairChanceMatchesAnotherSum(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ polite, scripts, units int }{{100, 100, 150}, {400, 40, 330}, {30, 70, 10}, {5, 5, 9}} {
		total := new(big.Int).Binomial(int64(c.polite+c.scripts), int64(c.units))
		inside := new(big.Int)
		for x := 0; x <= c.units; x++ {
			if x > c.polite || c.units-x > c.scripts {
				continue
			}
			r := Ratio(x, c.polite, c.units-x, c.scripts)
			if r < 0.8-1e-12 || r > 1.25+1e-12 || r == 0 && c.units-x == 0 {
				continue
			}
			w := new(big.Int).Binomial(int64(c.polite), int64(x))
			inside.Add(inside, w.Mul(w, new(big.Int).Binomial(int64(c.scripts), int64(c.units-x))))
		}
		want, _ := new(big.Rat).SetFrac(inside, total).Float64()
		got, err := FairChance(c.polite, c.scripts, c.units)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-want) > 1e-12 {
			t.Errorf("FairChance%v = %v, want %v", c, got, want)
		}
	}
	// The edges: 4 of 4 polite and 4 of 5 scripts is 1.25 exactly, and the mirror 0.8.
	if !withinBound(4, 4, 5, 8) || !withinBound(4, 5, 4, 8) {
		t.Error("a ratio of exactly 1.25 or 0.8 is within the bound")
	}
	if withinBound(5, 5, 5, 5) {
		t.Error("no script winning is outside the bound")
	}
}

func TestFairChanceRefusesImpossibleCrowds(t *testing.T) {
	t.Parallel()
	for _, c := range [][3]int{{0, 10, 5}, {10, 0, 5}, {10, 10, 0}, {10, 10, 21}} {
		if _, err := FairChance(c[0], c[1], c[2]); err == nil {
			t.Errorf("FairChance%v: no error", c)
		}
	}
}

// TestPickedCrowdsMeetTheBound: the default mixes of -opening-fair meet the bound in 19 runs
// of 20 under a fair draw (issue #33's acceptance), and a crowd too small does not.
func TestPickedCrowdsMeetTheBound(t *testing.T) {
	t.Parallel()
	mixes, err := parseMixes(defaultMixes)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mixes {
		p, err := FairChance(m.Polite, m.Scripts, m.Units)
		if err != nil {
			t.Fatal(err)
		}
		if p < 0.95 {
			t.Errorf("mix %v: a fair draw meets the bound with probability %.4f, under 0.95", m, p)
		}
	}
	if p, _ := FairChance(200, 20, 110); p >= 0.95 {
		t.Errorf("200 polite, 20 scripts, 110 units: %.4f, expected far under 0.95", p)
	}
}

// TestFairFlags: the -opening-fair flags parse into FairOptions, and what cannot run is
// refused before anything starts.
func TestFairFlags(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) (Options, error) {
		var o Options
		var on bool
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		o.Register(fs, &on)
		if err := fs.Parse(args); err != nil {
			return o, err
		}
		return o, o.Validate()
	}
	o, err := parse("-opening-fair", "-opening-mixes", "10:5:7", "-opening-seeds", "2", "-opening-speed", "0")
	if err != nil {
		t.Fatal(err)
	}
	if !o.Fair.On || o.Fair.Mixes != "10:5:7" || o.Fair.Seeds != 2 || o.Fair.Speed != 0 || o.Fair.Admit != 1000 {
		t.Errorf("parsed %+v", o.Fair)
	}
	for _, bad := range [][]string{
		{"-opening-fair", "-opening-mixes", "10:5"},
		{"-opening-fair", "-opening-mixes", "10:5:15"},
		{"-opening-fair", "-opening-mixes", "10:0:5"},
		{"-opening-fair", "-opening-seeds", "0"},
		{"-opening-fair", "-opening-fair-lead", "1s"},
		{"-opening-fair", "-opening-admit", "0"},
		{"-opening-line", "-1"},
	} {
		if _, err := parse(bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
