package relay

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/atomicfile"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// Warm restart: the cache is written to cache.persist_path and loaded at
// start, so a restarted relay serves clients at once even when no upstream is
// reachable. Loaded resources are replaced as soon as the upstream answers;
// one it says nothing of once subscribed stays unsure (see wordUnsure),
// unless a Delta server was told the relay holds it.
//
// File format: the magic line, then one protobuf-wire record per type
// (field 1: type URL, 2: wildcard set complete, 3: resources, each with 1:
// name, 2: authority, 3: upstream version, 4: the serialized Any, 5: the
// serialized TP2 constraints of a variant, 6: listed by the default servers,
// 7: the upstream's spelling of the name), then the SHA-256 of everything
// before it. Versions are not stored: they are derived again from the bytes,
// so nothing in the file is trusted beyond its bytes. A name with TP2
// variants is stored as its variants; subscriptions with parameters select
// from them again after the restart.

const persistMagic = "xds-relay cache v1\n"

// persisted is one type of the warm-restart file: its View (the names kept
// without variants) and its stored TP2 variants.
type persisted struct {
	view     *downstream.View
	variants []variant
}

// persister rewrites the file after changes, at most once per interval,
// and once at Close.
type persister struct{ w *atomicfile.Writer }

func newPersister(path string, interval time.Duration, log *zap.Logger, m *metrics.Metrics,
	views func() []persisted) *persister {
	return &persister{w: atomicfile.NewWriter(path, func() []byte { return encodeCache(views()) }, atomicfile.WriterOptions{
		Interval: interval,
		Logger:   log,
		OnWrite: func(r atomicfile.Result) {
			m.WarmFileWritten(metrics.WarmFileCache, r.Bytes, r.Unchanged, r.Err)
		},
	})}
}

// touch notes a change; it never blocks.
func (p *persister) touch() { p.w.Touch() }

// close writes the file one last time and stops.
func (p *persister) close() { p.w.Close() }

// encodeCache encodes types, in order. The same cache encodes to the same
// bytes (resources sorted by name), so that a write with nothing changed is
// recognised and skipped.
func encodeCache(types []persisted) []byte {
	b := []byte(persistMagic)
	for _, p := range types {
		v := p.view
		var t []byte
		t = protowire.AppendTag(t, 1, protowire.BytesType)
		t = protowire.AppendString(t, v.TypeURL)
		if v.Complete {
			t = protowire.AppendTag(t, 2, protowire.VarintType)
			t = protowire.AppendVarint(t, 1)
		}
		appendResource := func(r *downstream.Resource) {
			var rb []byte
			rb = protowire.AppendTag(rb, 1, protowire.BytesType)
			rb = protowire.AppendString(rb, r.Name)
			rb = protowire.AppendTag(rb, 2, protowire.BytesType)
			rb = protowire.AppendString(rb, r.Authority)
			rb = protowire.AppendTag(rb, 3, protowire.BytesType)
			rb = protowire.AppendString(rb, r.UpstreamVersion)
			rb = protowire.AppendTag(rb, 4, protowire.BytesType)
			rb = protowire.AppendBytes(rb, r.Any)
			if r.ConstraintsWire != nil {
				rb = protowire.AppendTag(rb, 5, protowire.BytesType)
				rb = protowire.AppendBytes(rb, r.ConstraintsWire)
			}
			if r.Listed {
				rb = protowire.AppendTag(rb, 6, protowire.VarintType)
				rb = protowire.AppendVarint(rb, 1)
			}
			if r.Spelling != "" {
				rb = protowire.AppendTag(rb, 7, protowire.BytesType)
				rb = protowire.AppendString(rb, r.Spelling)
			}
			t = protowire.AppendTag(t, 3, protowire.BytesType)
			t = protowire.AppendBytes(t, rb)
		}
		withVariants := make(map[string]bool, len(p.variants))
		for _, vr := range p.variants {
			withVariants[vr.res.Name] = true
			appendResource(vr.res)
		}
		for _, key := range slices.Sorted(maps.Keys(v.Resources)) {
			r := v.Resources[key]
			if key == r.Name && !withVariants[r.Name] && r.TTL == 0 { // (a TTL is not kept across restarts)
				appendResource(r) // (selections for parameters are not stored)
			}
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, t)
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

var errForeign = errors.New("not an xds-relay cache file")

// decodeCache parses a file written by encodeCache. Any damage is an error.
func decodeCache(data []byte) ([]persisted, error) {
	if !bytes.HasPrefix(data, []byte(persistMagic)) {
		return nil, errForeign
	}
	if len(data) < len(persistMagic)+sha256.Size {
		return nil, errors.New("truncated file")
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, errors.New("checksum mismatch")
	}
	var types []persisted
	err := eachField(body[len(persistMagic):], func(num protowire.Number, val []byte, _ uint64) error {
		if num != 1 {
			return fmt.Errorf("unexpected field %d", num)
		}
		v := &downstream.View{Resources: map[string]*downstream.Resource{}}
		p := persisted{view: v}
		err := eachField(val, func(num protowire.Number, val []byte, n uint64) error {
			switch num {
			case 1:
				v.TypeURL = string(val)
			case 2:
				v.Complete = n == 1
			case 3:
				r := &downstream.Resource{}
				if err := eachField(val, func(num protowire.Number, val []byte, n uint64) error {
					switch num {
					case 1:
						r.Name = string(val)
					case 2:
						r.Authority = string(val)
					case 3:
						r.UpstreamVersion = string(val)
					case 4:
						r.Any = bytes.Clone(val)
					case 5:
						r.ConstraintsWire = bytes.Clone(val)
					case 6:
						r.Listed = n == 1
					case 7:
						r.Spelling = string(val)
					}
					return nil
				}); err != nil {
					return err
				}
				if r.Name == "" || len(r.Any) == 0 {
					return errors.New("resource without name or body")
				}
				r.Glob = keying.GlobOf(r.Name) // (as decodeUpdate sets it)
				if r.ConstraintsWire == nil {
					r.Version = variantVersion(r.Any, "")
					v.Resources[r.Name] = r
					return nil
				}
				c := &discoverypb.DynamicParameterConstraints{}
				if err := proto.Unmarshal(r.ConstraintsWire, c); err != nil {
					return fmt.Errorf("constraints of %q: %w", r.Name, err)
				}
				r.Constraints = keying.CanonicalConstraints(c)
				r.Version = variantVersion(r.Any, r.Constraints)
				p.variants = append(p.variants, variant{res: r, c: c})
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !keying.ValidTypeURL(v.TypeURL) {
			return fmt.Errorf("bad type URL %q", v.TypeURL)
		}
		types = append(types, p)
		return nil
	})
	return types, err
}

// eachField calls f for every field of a protobuf-wire message: bytes fields
// with val, varints with n.
func eachField(b []byte, f func(num protowire.Number, val []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			if err := f(num, v, 0); err != nil {
				return err
			}
			b = b[m:]
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			if err := f(num, nil, v); err != nil {
				return err
			}
			b = b[m:]
		default:
			return fmt.Errorf("unexpected wire type %d", typ)
		}
	}
	return nil
}

// loadPersisted fills the cache from the warm-restart file, if there is a
// sound one. Called from New, before any stream can see the cache; the
// shared scope's upstream clients already run (their state callbacks take
// mu), so it holds mu too.
func (r *Relay) loadPersisted(path string) {
	s := r.lock()
	defer s.unlock()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		var types []persisted
		if types, err = decodeCache(data); err == nil {
			n := 0
			for _, p := range types {
				tc := s.shared.typeCache(p.view.TypeURL)
				e := editOf(p.view)
				for _, vr := range p.variants {
					tc.enterVariantMode(vr.res.Name, e.res)
					tc.putVariant(vr)
					n++
				}
				for _, vr := range p.variants {
					s.resolveVariants(tc, vr.res.Name, e)
				}
				if tc.unconfirmed == nil {
					tc.unconfirmed = make(map[string]bool)
				}
				for name, res := range e.res {
					e.change(name)
					tc.unconfirmed[res.Authority] = true // until its upstream answers
					if name == res.Name && res.Constraints == "" {
						// Not from this process's upstream: served, but taken for
						// deleted unless the upstream sends it again or, on Delta,
						// is told the relay holds it (upstreamVersions).
						tc.markUnsure(name)
					}
				}
				if p.view.Complete {
					// The wildcard's full set is the default servers' word,
					// whatever authorities its resources have (or none).
					tc.unconfirmed[""] = true
				}
				v := e.view(s.nextSeq())
				v.Unconfirmed = maps.Clone(tc.unconfirmed)
				s.publish(tc, v)
				for name := range v.Resources {
					s.unref.add(tc.lruKey(name))
					n++
				}
			}
			s.evict()
			r.log.Info("loaded the warm-restart file", zap.String("path", path), zap.Int("resources", n))
			return
		}
	}
	r.log.Error("ignoring the warm-restart file", zap.String("path", path), zap.Error(err))
}

// currentCache returns the shared scope's current Views and variants, in
// the order of their type URLs, names and constraints: secrets, node groups
// and nodes' own scopes are not written to disk.
func (r *Relay) currentCache() []persisted {
	s := r.lock()
	defer s.unlock()
	out := make([]persisted, 0, len(s.shared.types))
	for _, t := range slices.Sorted(maps.Keys(s.shared.types)) {
		if t == keying.SecretType {
			continue
		}
		tc := s.shared.types[t]
		p := persisted{view: tc.view}
		for _, known := range tc.names {
			p.variants = append(p.variants, known.variants...)
		}
		slices.SortFunc(p.variants, func(a, b variant) int {
			return cmp.Or(strings.Compare(a.res.Name, b.res.Name), strings.Compare(a.res.Constraints, b.res.Constraints))
		})
		out = append(out, p)
	}
	return out
}
