package report

// K6Metrics is the metrics part of k6's end-of-test summary (handleSummary's data, written as
// JSON), which the modes that run k6 read their figures and threshold verdicts from. Embed it
// in a mode's own summary type to read the rest of the summary beside it.
type K6Metrics struct {
	Metrics map[string]struct {
		Values     map[string]float64 `json:"values"`
		Thresholds map[string]struct {
			OK bool `json:"ok"`
		} `json:"thresholds"`
	} `json:"metrics"`
}

// Value is stat ("count", "rate", "med", "p(99)", ...) of metric; 0 when k6 reported none.
func (s K6Metrics) Value(metric, stat string) float64 { return s.Metrics[metric].Values[stat] }

// FailedThresholds lists the thresholds that failed, as "metric expression".
func (s K6Metrics) FailedThresholds() []string {
	var failed []string
	for name, m := range s.Metrics {
		for expr, t := range m.Thresholds {
			if !t.OK {
				failed = append(failed, name+" "+expr)
			}
		}
	}
	return failed
}
