package stock

import (
	"fmt"
	"strings"
)

// Defense selects the layers a purchase goes through. The zero value is the naive
// read-modify-write (read stock, compute, write the result back) that oversells under
// concurrency; it exists, like every setting but DefaultDefense, only to demonstrate what each
// layer does.
//
// Lock adds the per-product distributed lock and, with it, the fencing-token check. Version adds
// the optimistic version check and Guard the stock >= quantity condition. Any non-zero value
// decrements relatively (stock = stock - quantity), which arms the CHECK (stock >= 0) backstop;
// Check alone selects exactly that: no condition but the table's constraint.
type Defense struct {
	Lock    bool
	Version bool
	Guard   bool
	Check   bool
}

// DefaultDefense is the production setting: lock, version and guard, with fence and check.
func DefaultDefense() Defense {
	return Defense{Lock: true, Version: true, Guard: true, Check: true}
}

// Naive reports whether no layer is on.
func (d Defense) Naive() bool { return d == Defense{} }

// ParseDefense reads a comma-separated list of layers ("lock,version,guard"; "check"; or
// "none" for the naive write). Layers other than check imply check, since they decrement
// relatively.
func ParseDefense(s string) (Defense, error) {
	s = strings.TrimSpace(s)
	if s == "none" {
		return Defense{}, nil
	}
	var d Defense
	for _, part := range strings.Split(s, ",") {
		switch Layer(strings.TrimSpace(part)) {
		case LayerLock:
			d.Lock = true
		case LayerVersion:
			d.Version = true
		case LayerGuard:
			d.Guard = true
		case LayerCheck:
		default:
			return Defense{}, fmt.Errorf("unknown defense layer %q (want a list of lock, version, guard, check, or none)", part)
		}
		d.Check = true
	}
	return d, nil
}

// String formats d as ParseDefense reads it.
func (d Defense) String() string {
	if d.Naive() {
		return "none"
	}
	var parts []string
	for _, l := range []struct {
		on   bool
		name Layer
	}{{d.Lock, LayerLock}, {d.Version, LayerVersion}, {d.Guard, LayerGuard}} {
		if l.on {
			parts = append(parts, string(l.name))
		}
	}
	if len(parts) == 0 {
		return string(LayerCheck)
	}
	return strings.Join(parts, ",")
}
