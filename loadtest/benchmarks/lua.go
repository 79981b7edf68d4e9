package benchmarks

import _ "embed"

// wrkPreamble is what every wrk script of the benchmarks starts with (lua/preamble.lua): thread
// numbers, keys, and counting answers by status. The scripts below each add their requests and
// what they count.
//
//go:embed lua/preamble.lua
var wrkPreamble string

// wrkScript is a script's own lines after the preamble.
func wrkScript(own string) string { return wrkPreamble + own }
