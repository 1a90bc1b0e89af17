package admin

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/xds-relay/xds-relay/relay"
)

// MaxNACKNodes bounds NACKGroup.Nodes.
const MaxNACKNodes = 5

// NACKGroup is the streams whose last response of a type was rejected, for
// the same version with the same message: a bad version shows once, with how
// many streams reject it, not once per stream.
type NACKGroup struct {
	Type string `json:"type"`
	// Version is the rejected version: the one last sent.
	Version string `json:"version,omitempty"`
	Message string `json:"message"`
	// Streams counts the streams in the group.
	Streams int `json:"streams"`
	// Nodes names some of their node ids: distinct, sorted, at most
	// MaxNACKNodes (/debug/clients lists them all).
	Nodes []string `json:"nodes"`
}

// nackGroups groups the streams' last NACKs by (type, version, message), the
// largest groups first, at most MaxOverviewNACKs groups. It also returns the
// number of (stream, type) NACKs and of groups before the cut.
func nackGroups(clients []relay.ClientInfo) (groups []NACKGroup, streams, total int) {
	type key struct{ typ, version, msg string }
	byKey := map[key]*NACKGroup{}
	nodes := map[key]map[string]bool{}
	for _, c := range clients {
		for t, ti := range c.Types {
			if ti.LastNACK == "" {
				continue
			}
			streams++
			k := key{t, ti.SentVersion, ti.LastNACK}
			g := byKey[k]
			if g == nil {
				g = &NACKGroup{Type: t, Version: ti.SentVersion, Message: ti.LastNACK}
				byKey[k], nodes[k] = g, map[string]bool{}
			}
			g.Streams++
			nodes[k][c.NodeID] = true
		}
	}
	for k, g := range byKey {
		for n := range nodes[k] {
			g.Nodes = append(g.Nodes, n)
		}
		slices.Sort(g.Nodes)
		g.Nodes = g.Nodes[:min(len(g.Nodes), MaxNACKNodes)]
		groups = append(groups, *g)
	}
	slices.SortFunc(groups, func(a, b NACKGroup) int {
		return cmp.Or(cmp.Compare(b.Streams, a.Streams), strings.Compare(a.Type, b.Type),
			strings.Compare(a.Version, b.Version), strings.Compare(a.Message, b.Message))
	})
	total = len(groups)
	if len(groups) > MaxOverviewNACKs {
		groups = groups[:MaxOverviewNACKs]
	}
	return groups, streams, total
}

// humanCount formats a count for a reader: exact up to 9999 ("1234"), then
// three significant digits with a suffix ("12.3k", "4.56M", "1.20G").
func humanCount(v float64) string {
	if math.Abs(v) < 1e4 {
		return formatFloat(v)
	}
	f, i := v/1e3, 0
	for math.Abs(f) >= 999.5 && i < 3 {
		f /= 1e3
		i++
	}
	digits := 2
	switch {
	case math.Abs(f) >= 99.95:
		digits = 0
	case math.Abs(f) >= 9.995:
		digits = 1
	}
	return strconv.FormatFloat(f, 'f', digits, 64) + [...]string{"k", "M", "G", "T"}[i]
}

// thousands formats a value with thousands separators ("12,345"), integers
// without a fraction: the exact figure behind humanCount.
func thousands(v float64) string {
	s := formatFloat(v)
	if v != math.Trunc(v) || math.Abs(v) >= 1e15 {
		return s
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// share is the part of n in total as a whole percentage, rounded down so
// that 99.9% is not shown as 100%; 100 when total is 0.
func share(n, total int) int {
	if total == 0 {
		return 100
	}
	return n * 100 / total
}

// syncClass colours a type's share of streams on the current version: "ok"
// when all are current, "bad" when some NACK, "warn" when some are behind.
func syncClass(t TypeStreams) string {
	switch {
	case t.NACKing > 0:
		return "bad"
	case t.Behind > 0:
		return "warn"
	}
	return "ok"
}
