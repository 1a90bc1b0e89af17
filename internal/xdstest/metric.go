package xdstest

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric returns one sample of reg: sample is `name` or
// `name{a="x",b="y"}` with every label, in lexical order (as Prometheus
// prints them). It returns a counter's or gauge's value, 0 when the sample
// does not exist.
func Metric(tb testing.TB, reg prometheus.Gatherer, sample string) float64 {
	tb.Helper()
	fams, err := reg.Gather()
	if err != nil {
		tb.Fatalf("xdstest: gather: %v", err)
	}
	name, labels, _ := strings.Cut(strings.TrimSuffix(sample, "}"), "{")
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			ls := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
			}
			slices.Sort(ls)
			if strings.Join(ls, ",") != labels {
				continue
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
