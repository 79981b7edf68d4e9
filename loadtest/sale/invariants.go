package sale

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// checkInvariants reconciles what k6 was told with what Postgres holds, using SQL only — no
// service code is trusted here. unknownAllowed says whether orders the clients never heard
// about are acceptable (a replica was killed between commit and answer).
func checkInvariants(ctx context.Context, run *saleRun, raceStock int64, unknownAllowed bool) ([]verdict.Invariant, map[int64]verdict.Ledger, error) {
	out, byID, err := verdict.Ledgers(ctx, run.pool)
	if err != nil {
		return nil, nil, err
	}
	add := func(name string, ok bool, detail string, args ...any) {
		out = append(out, verdict.Invariant{Name: name, OK: ok, Detail: fmt.Sprintf(detail, args...)})
	}
	// Every order k6 was told about exists, with exactly its items.
	roles := map[int64]string{run.summary.SetupData.Hot: "hot", run.summary.SetupData.Second: "second", run.summary.SetupData.Race: "race"}
	rows, _ := run.pool.Query(ctx, `SELECT order_id, product_id, quantity FROM order_items`)
	inDB := map[uuid.UUID]map[string]int64{}
	var id uuid.UUID
	var product, qty int64
	_, err = pgx.ForEachRow(rows, []any{&id, &product, &qty}, func() error {
		if inDB[id] == nil {
			inDB[id] = map[string]int64{}
		}
		inDB[id][roles[product]] += qty
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read order items: %w", err)
	}
	missing, mismatched := 0, 0
	confirmed := map[uuid.UUID]bool{}
	for _, o := range run.orders {
		confirmed[o.id] = true
		got, ok := inDB[o.id]
		switch {
		case !ok:
			missing++
		case !sameUnits(got, o.units):
			mismatched++
		}
	}
	add("every confirmed order is in the database with its items", missing == 0 && mismatched == 0,
		"%d confirmed orders checked: %d missing, %d with other items", len(run.orders), missing, mismatched)
	unknown := 0
	for oid := range inDB {
		if !confirmed[oid] {
			unknown++
		}
	}
	if unknownAllowed {
		add("orders nobody was told about (allowed: a replica was killed)", true, "%d", unknown)
	} else {
		add("no order without a 201", unknown == 0, "%d orders in the database were never confirmed to a client", unknown)
	}

	var k6Units = map[string]float64{
		"hot":    run.summary.Value("confirmed_units_hot", "count"),
		"second": run.summary.Value("confirmed_units_second", "count"),
		"race":   run.summary.Value("confirmed_units_race", "count"),
	}
	unitsMatch := true
	var parts []string
	for _, role := range []string{"hot", "second", "race"} {
		pid := map[string]int64{"hot": run.summary.SetupData.Hot, "second": run.summary.SetupData.Second, "race": run.summary.SetupData.Race}[role]
		db := byID[pid].Sold
		if unknownAllowed && float64(db) < k6Units[role] || !unknownAllowed && float64(db) != k6Units[role] {
			unitsMatch = false
		}
		parts = append(parts, fmt.Sprintf("%s k6 %.0f / db %d", role, k6Units[role], db))
	}
	add("k6's confirmed units = units sold in the database", unitsMatch, "%s", strings.Join(parts, "; "))

	if raceStock > 0 && run.summary.SetupData.Race != 0 {
		r := byID[run.summary.SetupData.Race]
		add("exact race: every unit sold, none more", r.Sold == raceStock && r.Stock == 0, "%d of %d sold, %d left", r.Sold, raceStock, r.Stock)
	}

	return out, byID, nil
}

func sameUnits(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
