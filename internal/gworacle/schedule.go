package gworacle

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Options is one world: the replicas and the control plane's clusters.
type Options struct {
	// Replicas is the number of relays (2 or 3); data planes move between them.
	Replicas int
	// Clusters is the number of data plane clusters (gateway groups).
	Clusters int
	// FinalPublish: the schedule ends with a change of every cluster, so
	// that convergence does not depend on the relays asking again.
	FinalPublish bool
}

func (o Options) String() string {
	return fmt.Sprintf("replicas=%d clusters=%d final_publish=%v", o.Replicas, o.Clusters, o.FinalPublish)
}

// Op is what a step does.
type Op string

// The steps of a schedule.
const (
	OpPublish      Op = "publish"       // N changes to cluster Cluster, one snapshot
	OpJoin         Op = "join"          // data plane DP (Delta or not) of Cluster connects to relay Relay
	OpLeave        Op = "leave"         // a data plane goes away
	OpMove         Op = "move"          // a data plane reconnects, to relay Relay, with what it holds
	OpPause        Op = "pause"         // nothing happens for N ms
	OpUpstreamDown Op = "upstream-down" // the control plane stops
	OpUpstreamUp   Op = "upstream-up"   // the control plane serves again
	OpRelayRestart Op = "relay-restart" // relay Relay restarts (its data planes reconnect)
)

// Step is one event of a schedule.
type Step struct {
	Op      Op
	DP      string
	Delta   bool
	Cluster int
	Relay   int
	N       int
	// Brought (join): the data plane comes from elsewhere (a replica not in
	// the world) holding its cluster's state of Brought publishes ago (0:
	// the latest); -1: it holds nothing.
	Brought int
	At      int // the step's index in the generated schedule (Keep)
}

func (s Step) String() string {
	switch s.Op {
	case OpPublish:
		return fmt.Sprintf("publish %d changes to cluster c%d", s.N, s.Cluster)
	case OpJoin:
		kind := "sotw"
		if s.Delta {
			kind = "delta"
		}
		if s.Brought >= 0 {
			kind += fmt.Sprintf(", bringing the state of %d publishes ago", s.Brought)
		}
		return fmt.Sprintf("join %s (%s, cluster c%d) to relay %d", s.DP, kind, s.Cluster, s.Relay)
	case OpLeave:
		return "leave " + s.DP
	case OpMove:
		return fmt.Sprintf("move %s to relay %d", s.DP, s.Relay)
	case OpPause:
		return fmt.Sprintf("pause %d ms", s.N)
	case OpRelayRestart:
		return fmt.Sprintf("restart relay %d", s.Relay)
	}
	return string(s.Op)
}

// Schedule is a world and the steps run against it; Seed made them.
type Schedule struct {
	Seed  uint64
	Opts  Options
	Steps []Step
}

func (s *Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s\n", s.Seed, s.Opts)
	for _, st := range s.Steps {
		fmt.Fprintf(&b, "  %3d  %s\n", st.At, st)
	}
	return b.String()
}

// Keep returns the schedule with only the steps generated at the given
// indices (the numbers a schedule prints): a shrunk schedule replayed.
func (s *Schedule) Keep(at []int) *Schedule {
	c := &Schedule{Seed: s.Seed, Opts: s.Opts}
	for _, st := range s.Steps {
		if slices.Contains(at, st.At) {
			c.Steps = append(c.Steps, st)
		}
	}
	return c
}

// Generate returns the schedule of seed: its world and n steps. Every
// cluster is published before the first step.
func Generate(seed uint64, n int) *Schedule {
	rng := rand.New(rand.NewPCG(seed, 1))
	s := &Schedule{Seed: seed, Opts: Options{Replicas: 2 + rng.IntN(2), Clusters: 1 + rng.IntN(2), FinalPublish: rng.IntN(2) == 0}}
	var dps []string // present data planes
	down, next := false, 0
	for i := 0; len(s.Steps) < n; i++ {
		st := Step{At: i, Relay: rng.IntN(s.Opts.Replicas), Cluster: rng.IntN(s.Opts.Clusters)}
		switch x := rng.IntN(100); {
		case x < 28:
			st.Op, st.N = OpPublish, 1+rng.IntN(4)
		case x < 44 || len(dps) == 0:
			st.Op, st.DP, st.Delta, st.Brought = OpJoin, fmt.Sprintf("dp%d", next), rng.IntN(2) == 0, -1
			if b := rng.IntN(8); b < 4 {
				st.Brought = b / 2 * rng.IntN(4) // half of them the latest state
			}
			next++
			dps = append(dps, st.DP)
		case x < 49:
			j := rng.IntN(len(dps))
			st.Op, st.DP = OpLeave, dps[j]
			dps = slices.Delete(dps, j, j+1)
		case x < 66:
			st.Op, st.DP = OpMove, dps[rng.IntN(len(dps))]
		case x < 76:
			st.Op = OpRelayRestart
		case x < 90:
			st.Op = OpUpstreamDown
			if down {
				st.Op = OpUpstreamUp
			}
			down = !down
		default:
			st.Op, st.N = OpPause, 20*(1+rng.IntN(10))
		}
		s.Steps = append(s.Steps, st)
	}
	return s
}
