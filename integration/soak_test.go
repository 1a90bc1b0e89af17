package integration_test

// Soak tests: sustained churn with clients coming and going. By default
// each runs a few seconds; with -soak (go test ./integration -run Soak
// -soak -timeout 2h) or XDS_SOAK=1 they, and the chaos tests, run their long
// variants.

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

var soakFlag = flag.Bool("soak", false, "run the long variants of the chaos and soak tests (or set XDS_SOAK=1)")

// soakMode reports whether the long variants run.
func soakMode() bool { return *soakFlag || os.Getenv("XDS_SOAK") == "1" }

// scaled is short normally and long in soak mode.
func scaled(short, long int) int {
	if soakMode() {
		return long
	}
	return short
}

// Clients subscribe, churn and leave while the upstream content changes;
// those present converge at every checkpoint, and when they are gone the
// relay's streams and goroutines are released.
func TestSoakChurnAndClientTurnover(t *testing.T) {
	rounds := scaled(30, 3000)
	slots := scaled(30, 300)
	rng := rand.New(rand.NewPCG(1, 2))
	up := xdstest.StartUpstream(t)
	g := 0
	up.SetResources(churn(g))
	// A short linger exercises the release and re-subscription upstream of
	// the names clients leave and come back to.
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Upstream.Linger = 20 * time.Millisecond }))

	// The anchor stays for the whole test; the baseline of goroutines is
	// taken once the relay is connected upstream and serving it.
	anchor := fleet{newClient(t, r.Addr(), "anchor", clientOpts{delta: true}, churnSubs(0)...)}
	anchor.waitConverged(t, stateOf(t, churn(g)), "anchor")
	baseline := runtime.NumGoroutine()

	next := 0
	spawn := func() *xdsClient {
		next++
		return newClient(t, r.Addr(), fmt.Sprintf("soak-%d", next),
			clientOpts{delta: next%2 == 0, legacyWildcard: next%3 == 0}, churnSubs(rng.IntN(100))...)
	}
	f := make(fleet, slots)
	for i := range f {
		f[i] = spawn()
	}
	for round := 1; round <= rounds; round++ {
		g++
		up.SetResources(churn(g))
		for range 1 + rng.IntN(3) { // some clients leave, others arrive
			i := rng.IntN(len(f))
			f[i].Close()
			f[i] = spawn()
		}
		if round%2 == 0 { // and some change their minds
			f[rng.IntN(len(f))].SetSub(churnSubs(rng.IntN(100))[1])
		}
		if round%10 == 0 || round == rounds {
			f.waitConverged(t, stateOf(t, churn(g)), fmt.Sprintf("round %d", round))
		}
	}
	anchor.checkHeld(t, stateOf(t, churn(g)), "anchor")
	t.Logf("%d rounds, %d clients started, upstream streams %d", rounds, next, up.TotalStreams())
	if n := up.TotalStreams(); n != 1 {
		t.Errorf("upstream saw %d streams, want 1", n)
	}

	for _, c := range f {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		streams, goroutines := len(r.DebugClients("")), runtime.NumGoroutine()
		// A little slack for the runtime's and grpc's own idle goroutines.
		if streams == 1 && goroutines <= baseline+5 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("after the clients left: %d relay streams (want 1), %d goroutines (baseline %d)",
				streams, goroutines, baseline)
		case <-tick.C: // streams and goroutines end asynchronously; poll
		}
	}
	g++
	up.SetResources(churn(g))
	anchor.waitConverged(t, stateOf(t, churn(g)), "anchor at the end")
}
