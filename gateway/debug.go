package gateway

import (
	"maps"
	"slices"
	"strings"
)

// GroupInfo is one group in /debug/gateway.
type GroupInfo struct {
	Key      string `json:"key"`
	Protocol string `json:"protocol"` // gateway-sotw or gateway-delta
	// UpstreamNode is the node_id the group presents upstream.
	UpstreamNode string `json:"upstream_node"`
	Server       string `json:"server,omitempty"`
	Connected    bool   `json:"connected"`
	Streams      int    `json:"streams"`
	// Version and Bytes are a SotW group's snapshot.
	Version string `json:"version,omitempty"`
	Bytes   int    `json:"bytes,omitempty"`
	// Types are a Delta group's cached types.
	Types map[string]TypeInfo `json:"types,omitempty"`
}

// TypeInfo is one type of a Delta group's cache.
type TypeInfo struct {
	Resources     int    `json:"resources"`
	Known         bool   `json:"known"` // the upstream answered the type
	SystemVersion string `json:"system_version,omitempty"`
	Subscribers   int    `json:"subscribers"`
}

// DebugInfo is /debug/gateway: the groups, and the latest status report of
// each data plane (at most reportLimit).
type DebugInfo struct {
	Groups  []GroupInfo `json:"groups"`
	Reports []Report    `json:"reports"`
}

// Debug returns /debug/gateway; with nodeID, only that node's report.
func (s *Server) Debug(nodeID string, reportLimit int) DebugInfo {
	s.mu.Lock()
	sotw := slices.Collect(maps.Values(s.sotw))
	delta := slices.Collect(maps.Values(s.delta))
	s.mu.Unlock()
	info := DebugInfo{Groups: []GroupInfo{}}
	for _, g := range sotw {
		g.mu.Lock()
		info.Groups = append(info.Groups, GroupInfo{Key: g.name, Protocol: protoSotW, UpstreamNode: g.req.GetNodeId(),
			Server: g.server, Connected: g.connected, Streams: len(g.streams), Version: g.version, Bytes: len(g.snapshot)})
		g.mu.Unlock()
	}
	for _, g := range delta {
		g.mu.Lock()
		gi := GroupInfo{Key: g.name, Protocol: protoDelta, UpstreamNode: g.nodeID, Server: g.server,
			Connected: g.connected, Streams: len(g.streams), Types: make(map[string]TypeInfo, len(g.types))}
		for t, dt := range g.types {
			gi.Types[t] = TypeInfo{Resources: len(dt.res), Known: dt.known, SystemVersion: dt.systemVersion, Subscribers: dt.refs}
		}
		g.mu.Unlock()
		info.Groups = append(info.Groups, gi)
	}
	slices.SortFunc(info.Groups, func(a, b GroupInfo) int {
		if c := strings.Compare(a.Protocol, b.Protocol); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	info.Reports = s.reports.Reports(nodeID, reportLimit)
	if info.Reports == nil {
		info.Reports = []Report{}
	}
	return info
}
