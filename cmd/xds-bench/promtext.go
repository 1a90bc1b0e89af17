package main

import (
	"fmt"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metrics is a parsed Prometheus text exposition: samples by metric name.
type metrics map[string][]sample

// sample is one sample of a counter, gauge or untyped family.
type sample struct {
	labels map[string]string
	value  float64
}

// parseMetrics parses the Prometheus text format with prometheus/common's
// expfmt, the format's own parser. Counters, gauges and untyped samples are
// kept (the report reads no histogram).
func parseMetrics(text string) (metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("xds-bench: metrics: %w", err)
	}
	m := metrics{}
	for name, f := range fams {
		for _, s := range f.GetMetric() {
			var v float64
			switch {
			case s.Counter != nil:
				v = s.GetCounter().GetValue()
			case s.Gauge != nil:
				v = s.GetGauge().GetValue()
			case s.Untyped != nil:
				v = s.GetUntyped().GetValue()
			default:
				continue
			}
			labels := make(map[string]string, len(s.GetLabel()))
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			m[name] = append(m[name], sample{labels: labels, value: v})
		}
	}
	return m, nil
}

// sum returns the sum of name's samples whose labels include every pair of
// match, and whether any matched.
func (m metrics) sum(name string, match map[string]string) (float64, bool) {
	total, found := 0.0, false
next:
	for _, s := range m[name] {
		for k, v := range match {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
		found = true
	}
	return total, found
}

// max returns the largest of name's samples, and whether there was one.
func (m metrics) max(name string) (float64, bool) {
	best, found := 0.0, false
	for _, s := range m[name] {
		if !found || s.value > best {
			best, found = s.value, true
		}
	}
	return best, found
}
