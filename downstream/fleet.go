package downstream

import "github.com/xds-relay/xds-relay/internal/metrics"

// SyncCounts counts the streams of each type by sync state (the fleet
// summary: metrics.SyncCount). It locks each stream once, as Streams does:
// read at a scrape, never on the fan-out path.
func (s *Server) SyncCounts() []metrics.SyncCount {
	s.mu.Lock()
	all := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		all = append(all, st)
	}
	s.mu.Unlock()
	byType := map[string]*metrics.SyncCount{}
	for _, st := range all {
		st.mu.Lock()
		for t, ts := range st.types {
			c := byType[t]
			if c == nil {
				c = &metrics.SyncCount{TypeURL: t}
				byType[t] = c
			}
			switch {
			case ts.rejecting:
				c.NACKing++
			case ts.lastNonce == "" || ts.ackedVersion != ts.sentVersion || st.q.pending(t):
				c.Behind++
			default:
				c.Current++
			}
		}
		st.mu.Unlock()
	}
	out := make([]metrics.SyncCount, 0, len(byType))
	for _, c := range byType {
		out = append(out, *c)
	}
	return out
}

// pending reports whether a change of typeURL waits in the queue.
func (q *queue) pending(typeURL string) bool {
	for _, it := range q.items {
		if it.view.TypeURL == typeURL {
			return true
		}
	}
	return false
}
