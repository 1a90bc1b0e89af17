package metrics

import "github.com/prometheus/client_golang/prometheus"

// SyncCount is how many downstream streams of one type are in each sync
// state: Current (the latest response ACKed, nothing pending), Behind
// (nothing sent yet, a response unanswered or a change not sent yet) and NACKing (the client
// rejects the type's latest response).
type SyncCount struct {
	TypeURL                  string
	Current, Behind, NACKing int
}

// SyncFamily is the name of the fleet sync gauge.
const SyncFamily = namespace + "_fleet_sync_streams"

var syncDesc = prometheus.NewDesc(SyncFamily,
	"Downstream streams per type by sync state: current (latest response ACKed, nothing pending), "+
		"behind (nothing sent yet, a response unanswered or a change not sent yet), nacking (the latest response rejected).",
	[]string{"type_url", "state"}, nil)

// CollectSync registers xds_relay_fleet_sync_streams, whose samples f
// returns at each scrape (by type URL; samples of one type label are
// summed). f must be safe for concurrent use.
func (m *Metrics) CollectSync(f func() []SyncCount) {
	m.Registry.MustRegister(syncCounts(f))
}

// syncCounts collects the fleet sync gauge from a function.
type syncCounts func() []SyncCount

func (syncCounts) Describe(ch chan<- *prometheus.Desc) { ch <- syncDesc }

func (f syncCounts) Collect(ch chan<- prometheus.Metric) {
	byType := make(map[string]SyncCount)
	for _, s := range f() {
		l := TypeLabel(s.TypeURL)
		sum := byType[l]
		sum.Current += s.Current
		sum.Behind += s.Behind
		sum.NACKing += s.NACKing
		byType[l] = sum
	}
	for l, s := range byType {
		ch <- prometheus.MustNewConstMetric(syncDesc, prometheus.GaugeValue, float64(s.Current), l, "current")
		ch <- prometheus.MustNewConstMetric(syncDesc, prometheus.GaugeValue, float64(s.Behind), l, "behind")
		ch <- prometheus.MustNewConstMetric(syncDesc, prometheus.GaugeValue, float64(s.NACKing), l, "nacking")
	}
}
