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

// decrementSQL is the batch's UPDATE (the u step of commitSQL), over the rows d(id, qty,
// read_stock, read_version, fence): one conditional decrement per product, of the batch's summed
// quantity, with the conditions the selected layers add. Every setting but the naive one
// decrements relatively (stock = stock - qty), which keeps the CHECK (stock >= 0) backstop
// armed; the naive one writes back the stock computed from the read, which is precisely what
// loses concurrent updates.
func decrementSQL(d Defense) string {
	set := "stock = p.stock - d.qty"
	if d.Naive() {
		set = "stock = d.read_stock - d.qty"
	}
	set += ", version = p.version + 1, updated_at = now()"
	where := []string{"p.id = d.id"}
	if d.Version {
		where = append(where, "p.version = d.read_version")
	}
	if d.Guard {
		where = append(where, "p.stock >= d.qty")
	}
	if d.Lock {
		set += ", fence = d.fence"
		where = append(where, "p.fence <= d.fence")
	}
	return "UPDATE products p SET " + set + " FROM d WHERE " + strings.Join(where, " AND ")
}
