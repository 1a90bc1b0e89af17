package gateway

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xds-relay/xds-relay/internal/atomicfile"
	"github.com/xds-relay/xds-relay/internal/metrics"
)

// Warm restart: with a persist path, the gateway's cache — each SotW group's
// snapshot and each Delta group's resources — is written there within a
// persist interval of a change (Options.PersistInterval) and at Close, and
// loaded at start. A group created after
// a restart starts from it: its data planes are served at once, even while
// no upstream is reachable, and the Delta upstream is told what the cache
// holds (initial_resource_versions). A loaded snapshot and loaded Delta
// types count as not confirmed yet: no data plane that came with another
// version is sent the snapshot, and nothing is reported removed, until the
// upstream answered.
//
// Private keys are not written: a snapshot that carries SecretMaterial
// (ConfigSnapshot field 8) and Delta SecretMaterial resources are left out;
// those wait for the upstream after a restart.
//
// File format: the magic line, then protobuf-wire records — field 1, a SotW
// group {1: key, 2: version, 3: snapshot}; field 2, a Delta type {1: key,
// 2: type URL, 3: system version, 4: each Resource as the upstream encoded
// it} — then the SHA-256 of everything before it.

const persistMagic = "xds-relay gateway cache v1\n"

// warmCache is what the file held and no group has taken yet. Guarded by
// Server.mu.
type warmCache struct {
	sotw  map[string]warmSnapshot
	delta map[string]map[string]warmType // group key → type URL →
}

type warmSnapshot struct {
	version  string
	snapshot []byte
}

type warmType struct {
	systemVersion string
	resources     []*resource
}

// persister rewrites the file after changes, at most once per interval.
type persister struct{ w *atomicfile.Writer }

func newPersister(path string, interval time.Duration, log *zap.Logger, m *metrics.Metrics,
	content func() *warmCache) *persister {
	return &persister{w: atomicfile.NewWriter(path, func() []byte { return encodeWarm(content()) }, atomicfile.WriterOptions{
		Interval: interval,
		Logger:   log,
		OnWrite: func(r atomicfile.Result) {
			m.WarmFileWritten(metrics.WarmFileGateway, r.Bytes, r.Unchanged, r.Err)
		},
	})}
}

func (p *persister) touch() { p.w.Touch() }
func (p *persister) close() { p.w.Close() }

// currentCache is what the file must hold now: the groups' caches and what
// is still unused of the loaded file.
func (s *Server) currentCache() *warmCache {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &warmCache{sotw: make(map[string]warmSnapshot), delta: make(map[string]map[string]warmType)}
	for k, w := range s.warm.sotw {
		c.sotw[k] = w
	}
	for k, w := range s.warm.delta {
		c.delta[k] = w
	}
	for k, g := range s.sotw {
		g.mu.Lock()
		if g.version != "" && !g.secrets {
			c.sotw[k] = warmSnapshot{version: g.version, snapshot: g.snapshot}
		}
		g.mu.Unlock()
	}
	for k, g := range s.delta {
		g.mu.Lock()
		for t, dt := range g.types {
			if t == SecretMaterialType || len(dt.res) == 0 {
				continue
			}
			if c.delta[k] == nil {
				c.delta[k] = make(map[string]warmType)
			}
			w := warmType{systemVersion: dt.systemVersion}
			for _, r := range dt.res {
				w.resources = append(w.resources, r)
			}
			c.delta[k][t] = w
		}
		g.mu.Unlock()
	}
	return c
}

// encodeWarm encodes c. The same cache encodes to the same bytes (groups,
// types and resources sorted), so that a write with nothing changed is
// recognised and skipped.
func encodeWarm(c *warmCache) []byte {
	b := []byte(persistMagic)
	field := func(b []byte, num protowire.Number, v []byte) []byte {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, v)
	}
	for _, k := range slices.Sorted(maps.Keys(c.sotw)) {
		w := c.sotw[k]
		var r []byte
		r = field(r, 1, []byte(k))
		r = field(r, 2, []byte(w.version))
		r = field(r, 3, w.snapshot)
		b = field(b, 1, r)
	}
	for _, k := range slices.Sorted(maps.Keys(c.delta)) {
		types := c.delta[k]
		for _, t := range slices.Sorted(maps.Keys(types)) {
			w := types[t]
			var r []byte
			r = field(r, 1, []byte(k))
			r = field(r, 2, []byte(t))
			r = field(r, 3, []byte(w.systemVersion))
			resources := slices.SortedFunc(slices.Values(w.resources), func(a, b *resource) int {
				return strings.Compare(a.name, b.name)
			})
			for _, res := range resources {
				r = field(r, 4, res.raw)
			}
			b = field(b, 2, r)
		}
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// decodeWarm parses a file written by encodeWarm; any damage is an error.
func decodeWarm(data []byte) (*warmCache, error) {
	if !bytes.HasPrefix(data, []byte(persistMagic)) {
		return nil, errors.New("not an xds-relay gateway cache file")
	}
	if len(data) < len(persistMagic)+sha256.Size {
		return nil, errors.New("truncated file")
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, errors.New("checksum mismatch")
	}
	c := &warmCache{sotw: make(map[string]warmSnapshot), delta: make(map[string]map[string]warmType)}
	err := eachField(body[len(persistMagic):], func(num protowire.Number, typ protowire.Type, rec []byte) error {
		if typ != protowire.BytesType || (num != 1 && num != 2) {
			return fmt.Errorf("unexpected field %d", num)
		}
		var key, s2, s3 string
		var snapshot []byte
		var resources []*resource
		err := eachField(rec, func(n protowire.Number, typ protowire.Type, v []byte) error {
			if typ != protowire.BytesType {
				return fmt.Errorf("unexpected wire type %d", typ)
			}
			switch {
			case n == 1:
				key = string(v)
			case n == 2:
				s2 = string(v)
			case n == 3 && num == 1:
				snapshot = bytes.Clone(v)
			case n == 3:
				s3 = string(v)
			case n == 4 && num == 2:
				r, _, err := parseResource(bytes.Clone(v))
				if err != nil {
					return err
				}
				resources = append(resources, r)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if num == 1 {
			if s2 == "" {
				return fmt.Errorf("snapshot of group %q without a version", key)
			}
			c.sotw[key] = warmSnapshot{version: s2, snapshot: snapshot}
			return nil
		}
		if c.delta[key] == nil {
			c.delta[key] = make(map[string]warmType)
		}
		c.delta[key][s2] = warmType{systemVersion: s3, resources: resources}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// loadWarm reads the warm-restart file; a missing or damaged one gives an
// empty cache (logged).
func loadWarm(path string, log *zap.Logger) *warmCache {
	empty := &warmCache{}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return empty
	}
	if err == nil {
		var c *warmCache
		if c, err = decodeWarm(data); err == nil {
			log.Info("loaded the gateway warm-restart file", zap.String("path", path),
				zap.Int("sotw_groups", len(c.sotw)), zap.Int("delta_groups", len(c.delta)))
			return c
		}
	}
	log.Error("ignoring the gateway warm-restart file", zap.String("path", path), zap.Error(err))
	return empty
}
