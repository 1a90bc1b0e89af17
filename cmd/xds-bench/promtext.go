package main

import (
	"bufio"
	"strconv"
	"strings"
)

// metrics is a parsed Prometheus text exposition: samples by metric name.
type metrics map[string][]sample

// sample is one line of the exposition.
type sample struct {
	labels map[string]string
	value  float64
}

// parseMetrics parses the Prometheus text format, as much of it as the
// relay's /metrics uses: comments, "name value" and "name{k="v",...} value"
// (an optional timestamp after the value is ignored). Malformed lines are
// skipped.
func parseMetrics(text string) metrics {
	m := metrics{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		labels := map[string]string{}
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, rest = line[:i], line[j+1:]
			var ok bool
			if labels, ok = parseLabels(line[i+1 : j]); !ok {
				continue
			}
		} else if i := strings.IndexAny(line, " \t"); i >= 0 {
			name, rest = line[:i], line[i:]
		} else {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		m[name] = append(m[name], sample{labels: labels, value: v})
	}
	return m
}

// parseLabels parses `k="v",k2="v2"` with the format's escapes (\\, \", \n).
func parseLabels(s string) (map[string]string, bool) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if s == "" {
			return labels, true
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return nil, false
		}
		key := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			c := s[i]
			if c == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					c = '\n'
				default:
					c = s[i]
				}
			}
			val.WriteByte(c)
		}
		if i >= len(s) {
			return nil, false
		}
		labels[key] = val.String()
		s = s[i+1:]
	}
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
