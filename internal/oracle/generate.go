package oracle

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// GeneratePlain returns the schedule of seed without the widened
// dimensions (Dims): the oracle's schedules before them, which the
// regression table replays.
func GeneratePlain(seed uint64, steps int) *Schedule {
	rng := rand.New(rand.NewPCG(seed, 1))
	o := Options{
		Protocol:        []string{"sotw", "delta"}[rng.IntN(2)],
		Ordered:         rng.IntN(2) == 0,
		Replicas:        1 + rng.IntN(2),
		Fallback:        rng.IntN(4) == 0,
		Persist:         rng.IntN(2) == 0,
		GroupBy:         rng.IntN(4) == 0,
		MaxUnreferenced: rng.IntN(4),
		Rollout:         rng.IntN(4) == 0,
	}
	if o.Persist && o.MaxUnreferenced == 0 {
		o.MaxUnreferenced = 1 // config: persist_path needs max_unreferenced > 0
	}
	o.World = WorldOptions{TP2: rng.IntN(3) == 0, DoNotCache: rng.IntN(5) == 0, Bad: o.Rollout}
	o.Forgetful = o.Protocol == "delta" && rand.New(rand.NewPCG(seed, 2)).IntN(2) == 0
	s := &Schedule{Seed: seed, Opts: o}
	var clients []string
	down := map[int]bool{}
	next := 0
	join := func() {
		next++
		spec := ClientSpec{ID: fmt.Sprintf("c%d", next), Shape: Shape(rng.IntN(2)), Delta: rng.IntN(2) == 0,
			PerType: rng.IntN(5) == 0}
		if o.World.TP2 && spec.Shape == GRPC && rng.IntN(2) == 0 {
			spec.Env = []string{envProd, "test"}[rng.IntN(2)]
		}
		spec.Picky = o.World.Bad && rng.IntN(2) == 0
		s.Steps = append(s.Steps, Step{Op: OpJoin, Client: spec, Relay: rng.IntN(o.Replicas)})
		clients = append(clients, spec.ID)
	}
	for range 2 + rng.IntN(3) {
		join()
	}
	servers := 1
	if o.Fallback {
		servers = 2
	}
	for range steps {
		pick := func() ClientSpec { return ClientSpec{ID: clients[rng.IntN(len(clients))]} }
		switch k := rng.IntN(100); {
		case k < 30:
			s.Steps = append(s.Steps, Step{Op: OpPublish, N: 1 + rng.IntN(3)})
		case k < 40 && len(clients) < 8:
			join()
		case k < 45 && len(clients) > 1:
			i := rng.IntN(len(clients))
			s.Steps = append(s.Steps, Step{Op: OpLeave, Client: ClientSpec{ID: clients[i]}})
			clients = slices.Delete(clients, i, i+1)
		case k < 55:
			s.Steps = append(s.Steps, Step{Op: OpMove, Client: pick(), Relay: rng.IntN(o.Replicas)})
		case k < 60:
			s.Steps = append(s.Steps, Step{Op: OpSlow, Client: pick(), N: 5 + rng.IntN(40)})
		case k < 65:
			s.Steps = append(s.Steps, Step{Op: OpFast, Client: pick()})
		case k < 70:
			srv := rng.IntN(servers)
			op := OpUpstreamDown
			if down[srv] {
				op = OpUpstreamUp
			}
			down[srv] = !down[srv]
			s.Steps = append(s.Steps, Step{Op: op, Server: srv})
		case k < 74:
			s.Steps = append(s.Steps, Step{Op: OpRelayRestart, Relay: rng.IntN(o.Replicas)})
		default:
			s.Steps = append(s.Steps, Step{Op: OpPause, N: rng.IntN(60)})
		}
	}
	for i := range s.Steps {
		s.Steps[i].At = i
	}
	return s
}
