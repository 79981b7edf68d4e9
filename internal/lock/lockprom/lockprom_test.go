package lockprom_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stocksvc/stocksvc/internal/lock/lockprom"
)

func TestObserverCounts(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	o := lockprom.New(reg, "test")
	o.Obtained("a", time.Millisecond, false)
	o.Obtained("a", 2*time.Millisecond, true)
	o.NotObtained("a", time.Second)
	o.Lost("a")
	o.RefreshFailed("a", errors.New("down"))

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	for name, want := range map[string]float64{
		"test_lock_contended_total":        2,
		"test_lock_not_obtained_total":     1,
		"test_lock_losses_total":           1,
		"test_lock_refresh_failures_total": 1,
	} {
		f := byName[name]
		if f == nil {
			t.Errorf("%s missing", name)
			continue
		}
		if got := f.GetMetric()[0].GetCounter().GetValue(); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	acq := map[string]float64{}
	for _, m := range byName["test_lock_acquisitions_total"].GetMetric() {
		acq[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if len(acq) != 2 || acq["first_try"] != 1 || acq["contended"] != 1 {
		t.Errorf("acquisitions = %v, want one first_try and one contended, and no other label", acq)
	}
	if got := byName["test_lock_wait_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); got != 3 {
		t.Errorf("wait observations = %d, want 3", got)
	}
}
