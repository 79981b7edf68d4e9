// Package line puts a product's sale behind a line: customers join and get a signed ticket,
// everyone who joined before the opening gets a random place at the opening (a seed recorded
// in Postgres, so that the draw can be shown afterwards), later arrivals go to the back in
// arrival order, and the line admits buyers from the front at the pace the stock allows
// (Admissions, admission.go). An admitted ticket's status carries a signed pass; an order for
// a lined product needs one (Service.Admit), checked before anything else the order costs.
//
// The line's state lives in Postgres (package linepg; linetest is an in-memory store that
// passes the same contract): a place is a promise to a person. Each replica keeps a view of
// every line it serves, refreshed when Postgres announces a change (LISTEN/NOTIFY) and by a
// poll, and answers statuses and long-polls from it; its keeper (keeper.go) advances the
// lines — the draw, admissions, expiries — at the opening, when something changes, and on a
// tick. Every change is one transaction under the line's row lock, on any replica.
//
// This package is a domain core beside package stock: it reads products through the
// interfaces it declares (Products, Views) and imports no driver.
package line
