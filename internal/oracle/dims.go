package oracle

import (
	"fmt"
	"time"

	"math/rand/v2"
	"slices"
	"strings"

	"github.com/xds-relay/xds-relay/config"
)

// Dims are the dimensions of the widened generator: each is drawn by the
// seed from a stream of its own, so that a schedule that draws none is the
// one GeneratePlain returns.
type Dims struct {
	// Glob: the world has a second authority's clusters under a glob
	// collection (globName); some clients subscribe the glob.
	Glob bool
	// AuthServers: the authority names the same servers itself; else it
	// names none and the default servers serve it.
	AuthServers bool
	// Silence: upstream servers withhold their answers of a type (or of
	// every type) past the settle and does-not-exist times, for a while or
	// until a later step.
	Silence bool
	// Invalid: upstream servers send responses the relay must NACK (a
	// resource that does not decode, or of another type), and after a NACK
	// send again only on a change.
	Invalid bool
	// Escaped: some clusters are the authority's, named as Envoy spells
	// xdstp ids (svc%3A8080), by the upstream and the clients alike.
	Escaped bool
	// Replace (TP2 worlds): a cluster's unconstrained variant is deleted and
	// its constrained replacement created in one snapshot, and back.
	Replace bool
	// Foreign: the default servers list the authority's names in their
	// wildcard answer.
	Foreign bool
	// Large: once, more than 10,000 clusters come in one snapshot.
	Large bool
	// REST: the relays serve REST-JSON polling; some clients poll.
	REST bool
	// GCP: the upstream servers are go-control-plane v0.14's (a
	// SnapshotCache in ADS mode, SotW or Delta as the relays speak) instead
	// of the oracle's Upstream. They cannot do what go-control-plane does
	// not: no silences or invalid responses, no TP2 variants or
	// do_not_cache (worlds without them), no glob collections and no other
	// authority (a name is served to a wildcard whatever its authority:
	// no Glob, Escaped, Foreign, AuthServers). In ADS mode a SotW request
	// that names resources is answered only when it names every resource
	// of its type, which a relay of clients naming a subset never does: the
	// SotW worlds' clients are Envoys (they name every route and endpoint
	// once they read what names it; the watch go-control-plane drops
	// meanwhile is kept: keptWatches), without REST pollers. (Drawn from a stream of its own: the other
	// dimensions' draws, and the steps they add, stay as they were.)
	GCP bool
}

// quiet reports whether upstreams may say nothing of a name past the
// relays' does-not-exist time: silent, or silent after a NACK.
func (d Dims) quiet() bool { return d.Silence || d.Invalid }

// federated reports whether the world has names of the second authority.
func (d Dims) federated() bool { return d.Glob || d.Escaped }

func (d Dims) any() bool { return d != Dims{} }

func (d Dims) String() string {
	var out []string
	for _, f := range []struct {
		on   bool
		name string
	}{{d.Glob, "glob"}, {d.AuthServers, "auth-servers"}, {d.Silence, "silence"}, {d.Invalid, "invalid"},
		{d.Escaped, "escaped"}, {d.Replace, "replace"}, {d.Foreign, "foreign"}, {d.Large, "large"}, {d.REST, "rest"},
		{d.GCP, "gcp"}} {
		if f.on {
			out = append(out, f.name)
		}
	}
	return strings.Join(out, ",")
}

// ParseDims reads a comma-separated list of dimensions (as Dims prints
// them).
func ParseDims(s string) (Dims, error) {
	var d Dims
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(f) {
		case "":
		case "glob":
			d.Glob = true
		case "auth-servers":
			d.AuthServers = true
		case "silence":
			d.Silence = true
		case "invalid":
			d.Invalid = true
		case "escaped":
			d.Escaped = true
		case "replace":
			d.Replace = true
		case "foreign":
			d.Foreign = true
		case "large":
			d.Large = true
		case "rest":
			d.REST = true
		case "gcp":
			d.GCP = true
		default:
			return d, fmt.Errorf("oracle: unknown dimension %q", f)
		}
	}
	return d, nil
}

// DrawOpen makes seeds draw the dimensions whose failures are known and not
// fixed yet (openDims); without it they run only when forced (-oracle.dims),
// so that make test stays a gate while their bugs are open.
var DrawOpen bool

// DrawLarge makes seeds draw large worlds (more than 10,000 names): minutes
// each under the race detector, so make test leaves them to the soak (make
// soak sets it) and to -oracle.dims large.
var DrawLarge bool

// openDims are the dimensions with known, unfixed failures (issue 23), each
// named here with its seed: none that make test's seeds draw; none is
// known open now. foreign was open until seeds 5496 and
// 190215 (and seed 5502's occasional rollback) were fixed; seeds 4, 11, 12,
// 20, 1011, 1018, 1022, 2019, 2028, 2037, 3029, 4010, 5016, 5017, 5026,
// 5039, 5261, 5304, 5425, 5451, 5490, 5497, 5502, 5530, 5585, 6204 and 6221
// of foreign worlds were fixed before (the regression table); 5020 no longer
// fails.
var openDims = Dims{}

// drawDims draws the dimensions of a seed: each is rare enough that the
// plain world keeps most of the coverage.
func drawDims(x *rand.Rand) Dims {
	d := Dims{
		Glob:        x.IntN(4) == 0,
		AuthServers: x.IntN(2) == 0,
		Silence:     x.IntN(5) == 0,
		Invalid:     x.IntN(5) == 0,
		Escaped:     x.IntN(5) == 0,
		Replace:     x.IntN(2) == 0, // TP2 worlds only
		Foreign:     x.IntN(6) == 0,
		Large:       x.IntN(20) == 0,
		REST:        x.IntN(4) == 0,
	}
	d.Large = d.Large && DrawLarge
	if !DrawOpen {
		d.Foreign = d.Foreign && !openDims.Foreign
	}
	return d
}

// Generate returns the schedule of seed: a world and about steps steps,
// with the dimensions the seed draws.
func Generate(seed uint64, steps int) *Schedule { return GenerateDims(seed, steps, nil) }

// GenerateDims is Generate with the dimensions only (when not nil) instead
// of the drawn ones.
func GenerateDims(seed uint64, steps int, only *Dims) *Schedule {
	s := GeneratePlain(seed, steps)
	x := rand.New(rand.NewPCG(seed, 4))
	d := drawDims(x)
	d.GCP = rand.New(rand.NewPCG(seed, 6)).IntN(5) == 0 && (DrawOpen || !openDims.GCP)
	if only != nil {
		d = *only
	}
	if d.GCP {
		d = gcpWorld(s, d)
	}
	if d.Foreign && !d.federated() {
		d.Glob = true // names of another authority to list
	}
	if !d.federated() {
		d.AuthServers = false // no authority: nothing to serve
	}
	d.Replace = d.Replace && s.Opts.World.TP2
	s.Opts.Dims = d
	s.Opts.World.Escaped = d.Escaped
	widen(s, x)
	return s
}

// gcpWorld returns d without the dimensions go-control-plane cannot serve
// (see Dims.GCP), and makes s's world and clients fit it.
func gcpWorld(s *Schedule, d Dims) Dims {
	d.Glob, d.Escaped, d.Foreign, d.AuthServers, d.Silence, d.Invalid = false, false, false, false, false, false
	s.Opts.World.TP2, s.Opts.World.DoNotCache = false, false
	s.Opts.Forgetful = s.Opts.Protocol == "delta" // go-control-plane is
	sotw := s.Opts.Protocol == "sotw"
	d.REST = d.REST && !sotw
	for i := range s.Steps {
		if c := &s.Steps[i].Client; s.Steps[i].Op == OpJoin {
			c.Env = ""
			if sotw {
				c.Shape = Envoy
			}
		}
	}
	return d
}

// widen adds the steps and client traits of s's dimensions, drawn from x,
// and numbers the steps again.
func widen(s *Schedule, x *rand.Rand) {
	d := s.Opts.Dims
	if !d.any() {
		return
	}
	steps := slices.Clone(s.Steps)
	for i := range steps {
		if steps[i].Op != OpJoin {
			continue
		}
		c := &steps[i].Client
		if d.Glob && c.Env == "" {
			c.Glob = x.IntN(2) == 0
		}
		if d.REST && x.IntN(3) == 0 {
			// REST-JSON serves no resource locators (TP2): gRPC only.
			c.REST, c.PerType, c.Delta, c.Env = true, true, false, ""
		}
	}
	s.Steps = faultSteps(steps, d, x)
	for i := range s.Steps {
		s.Steps[i].At = i
	}
}

// mutateDims makes the changes of the run's dimensions that go with a
// publish step.
func (r *Run) mutateDims() []string {
	var what []string
	if r.sched.Opts.Dims.Glob && r.xrng.IntN(2) == 0 {
		what = append(what, r.model.mutateMembers(r.xrng))
	}
	if r.sched.Opts.Dims.Replace && r.xrng.IntN(3) == 0 {
		what = append(what, r.model.replaceDefault(r.xrng))
	}
	return what
}

// configDims sets up a relay's config for the run's dimensions.
func (r *Run) configDims(cfg *config.Config) {
	d := r.sched.Opts.Dims
	if d.REST {
		cfg.REST = &config.REST{PollTimeout: restPollTimeout(d)}
	}
	if d.Large {
		// The upstream sends a large world's snapshot type by type, its
		// responses seconds apart on a loaded machine: the relays wait that
		// long for a route's move after a removal, as operators of such
		// upstreams set them (docs/OPERATIONS.md, upstream.move_wait).
		cfg.Upstream.MoveWait = 10 * time.Second
	}
	if !d.federated() {
		return
	}
	a := config.Authority{}
	if d.AuthServers {
		a.XDSServers = cfg.Upstream.XDSServers
	}
	cfg.Upstream.Authorities = map[string]config.Authority{authority: a}
}
