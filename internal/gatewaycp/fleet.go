package gatewaycp

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
)

// StampKey is the annotation (HttpRoute) and metadata key (Listener) holding
// the decimal Unix time in nanoseconds a generated resource was made at; a
// snapshot's generated_at is the time of its last change. xds-loadgen
// measures propagation from them.
const StampKey = "xds-democp/created_unix_nano"

// Spec is a generated gateway configuration, the same for every cluster:
// Listeners listeners (listener-j on port 8000+j, HTTPS with a secret when
// there are Secrets), Routes HttpRoutes (route-i attached to listener
// i mod Listeners, routing to backend-(i+generation) mod Backends), Backends
// BackendClusters of EndpointsPerBackend endpoints and Secrets
// SecretMaterials.
type Spec struct {
	Listeners, Routes, Backends, EndpointsPerBackend, Secrets int
}

// Validate checks the counts.
func (s Spec) Validate() error {
	if s.Listeners < 1 || s.Routes < 1 || s.Backends < 1 || s.EndpointsPerBackend < 1 || s.Secrets < 0 {
		return fmt.Errorf("gatewaycp: spec %+v: want at least one listener, route, backend and endpoint", s)
	}
	return nil
}

// Fleet generates the snapshots of a Spec per cluster and churns their
// routes. Safe for concurrent use.
type Fleet struct {
	spec Spec

	mu   sync.Mutex
	gens map[string][]int       // cluster → per route generation
	made map[string][]time.Time // cluster → per route creation time
	born map[string]time.Time   // cluster → creation (listeners' stamp)
	at   map[string]time.Time   // cluster → last change
	next map[string]int         // cluster → the next route to churn
}

// NewFleet returns the fleet of spec.
func NewFleet(spec Spec) *Fleet {
	return &Fleet{spec: spec, gens: map[string][]int{}, made: map[string][]time.Time{}, born: map[string]time.Time{}, at: map[string]time.Time{},
		next: map[string]int{}}
}

// Snapshot returns cluster's current snapshot (created at now the first time).
func (f *Fleet) Snapshot(cluster string, now time.Time) *controlv1.ConfigSnapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initLocked(cluster, now)
	return f.buildLocked(cluster)
}

// Churn changes count routes of cluster (round robin), stamped now, and
// returns the new snapshot.
func (f *Fleet) Churn(cluster string, count int, now time.Time) *controlv1.ConfigSnapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initLocked(cluster, now)
	for range count {
		i := f.next[cluster]
		f.next[cluster] = (i + 1) % f.spec.Routes
		f.gens[cluster][i]++
		f.made[cluster][i] = now
	}
	f.at[cluster] = now
	return f.buildLocked(cluster)
}

func (f *Fleet) initLocked(cluster string, now time.Time) {
	if f.gens[cluster] != nil {
		return
	}
	f.gens[cluster] = make([]int, f.spec.Routes)
	f.made[cluster] = make([]time.Time, f.spec.Routes)
	for i := range f.made[cluster] {
		f.made[cluster][i] = now
	}
	f.at[cluster], f.born[cluster] = now, now
}

func stamp(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

func (f *Fleet) buildLocked(cluster string) *controlv1.ConfigSnapshot {
	sp := f.spec
	snap := &controlv1.ConfigSnapshot{Id: cluster, GeneratedAt: timestamppb.New(f.at[cluster])}
	for j := range sp.Listeners {
		l := &controlv1.Listener{Name: fmt.Sprintf("listener-%d", j), Address: "0.0.0.0", Port: uint32(8000 + j),
			Protocol: controlv1.ListenerProtocol_LISTENER_PROTOCOL_HTTP, Metadata: map[string]string{StampKey: stamp(f.born[cluster])}}
		if sp.Secrets > 0 {
			l.Protocol = controlv1.ListenerProtocol_LISTENER_PROTOCOL_HTTPS
			l.Tls = &controlv1.TlsConfig{Enabled: true, SecretRefs: []string{fmt.Sprintf("cert-%d", j%sp.Secrets)}}
		}
		for i := j; i < sp.Routes; i += sp.Listeners {
			l.AttachedRoutes = append(l.AttachedRoutes, fmt.Sprintf("default/route-%d", i))
		}
		snap.Listeners = append(snap.Listeners, l)
	}
	for i := range sp.Routes {
		gen := f.gens[cluster][i]
		snap.HttpRoutes = append(snap.HttpRoutes, &controlv1.HttpRoute{
			Name: fmt.Sprintf("route-%d", i), Namespace: "default", Hostnames: []string{fmt.Sprintf("svc-%d.example.com", i)},
			ParentRefs: []*controlv1.ParentRef{{Namespace: "default", Name: fmt.Sprintf("listener-%d", i%sp.Listeners)}},
			Rules: []*controlv1.HttpRule{{
				Matches:     []*controlv1.HttpMatch{{Path: "/", PathType: "PathPrefix"}},
				BackendRefs: []*controlv1.BackendRef{{Name: fmt.Sprintf("backend-%d", (i+gen)%sp.Backends), Port: 8080, Weight: 1}},
			}},
			Labels:      map[string]string{"generation": strconv.Itoa(gen)},
			Annotations: map[string]string{StampKey: stamp(f.made[cluster][i])},
		})
	}
	for k := range sp.Backends {
		b := &controlv1.BackendCluster{Name: fmt.Sprintf("backend-%d", k), Namespace: "default", Protocol: "http",
			ConnectTimeout: durationpb.New(time.Second)}
		for e := range sp.EndpointsPerBackend {
			b.Endpoints = append(b.Endpoints, &controlv1.BackendEndpoint{Address: fmt.Sprintf("10.%d.%d.%d", k/256%256, k%256, e%256),
				Port: 8080, Healthy: true, Zone: "zone-a"})
		}
		snap.Backends = append(snap.Backends, b)
	}
	for s := range sp.Secrets {
		snap.Secrets = append(snap.Secrets, &controlv1.SecretMaterial{Namespace: "default", Name: fmt.Sprintf("cert-%d", s),
			CertPem: "-----BEGIN CERTIFICATE-----\nxds-democp test certificate\n-----END CERTIFICATE-----\n",
			KeyPem:  "-----BEGIN PRIVATE KEY-----\nxds-democp test key\n-----END PRIVATE KEY-----\n"})
	}
	return snap
}

// CreatedUnixNano reads the creation stamp of a generated resource (a
// Listener's metadata, an HttpRoute's annotations); 0 when it has none.
func CreatedUnixNano(m proto.Message) int64 {
	var s string
	switch r := m.(type) {
	case *controlv1.Listener:
		s = r.GetMetadata()[StampKey]
	case *controlv1.HttpRoute:
		s = r.GetAnnotations()[StampKey]
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// SnapshotInfo reads a serialized DiscoveryResponse's version, nonce and
// snapshot generated_at without decoding the snapshot; zero time when absent.
func SnapshotInfo(resp []byte) (version, nonce string, at time.Time) {
	var snapshot []byte
	walk(resp, func(num protowire.Number, v []byte) {
		switch num {
		case 1:
			version = string(v)
		case 2:
			nonce = string(v)
		case 3:
			snapshot = v
		}
	})
	walk(snapshot, func(num protowire.Number, v []byte) {
		if num != 2 {
			return
		}
		var sec, nanos int64
		for b := v; len(b) > 0; { // a Timestamp has varints only
			n, typ, l := protowire.ConsumeTag(b)
			if l < 0 || typ != protowire.VarintType {
				return
			}
			b = b[l:]
			x, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return
			}
			b = b[m:]
			if n == 1 {
				sec = int64(x)
			} else if n == 2 {
				nanos = int64(x)
			}
		}
		at = time.Unix(sec, nanos)
	})
	return version, nonce, at
}

// walk calls f for every length-delimited field of b; other fields are
// skipped. It stops at the first malformed field.
func walk(b []byte, f func(num protowire.Number, v []byte)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return
			}
			f(num, v)
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return
		}
		b = b[m:]
	}
}
