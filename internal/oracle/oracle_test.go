package oracle_test

import (
	"bytes"
	"flag"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/xds-relay/xds-relay/internal/oracle"
)

var (
	seeds    = flag.Int("oracle.seeds", 40, "schedules to run: seeds oracle.seed .. oracle.seed+N-1")
	first    = flag.Uint64("oracle.seed", 1, "the first seed")
	steps    = flag.Int("oracle.steps", 40, "steps per schedule")
	duration = flag.Duration("oracle.duration", 0, "run schedules of random seeds for this long instead (make soak)")
	shrink   = flag.Duration("oracle.shrink", 2*time.Minute, "how long to shrink a failing schedule")
	logTo    = flag.String("oracle.log", "", "write the relays' debug log of a failing schedule to this file")
	keep     = flag.String("oracle.keep", "", "run only these steps of the schedule (comma-separated, as a shrunk schedule prints them)")
	all      = flag.Bool("oracle.all", false, "run every seed of the range, past failures (a survey of a new dimension)")
	large    = flag.Bool("oracle.large", false, "also draw large worlds, more than 10,000 names (oracle.DrawLarge; make soak sets it)")
	open     = flag.Bool("oracle.open", false, "also draw the dimensions whose failures are known and open (oracle.DrawOpen)")
	only     = flag.Uint64("oracle.regression", 0, "replay only the regression of this seed (TestOracleRegressions)")
	dims     = flag.String("oracle.dims", "", "generate schedules with exactly these dimensions (comma-separated, as a schedule prints them; \"none\" for the plain ones) instead of the drawn ones")
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOracle runs seeded schedules of the whole relay and checks every
// response every client receives (see the package doc). A failure prints the
// seed, the schedule and the shortest failing schedule found; replay one with
//
//	go test ./internal/oracle -run TestOracle -oracle.seed N -oracle.seeds 1 -oracle.log /tmp/relay.log
//
// and a shrunk one with -oracle.keep 1,11,12 (its step numbers).
func TestOracle(t *testing.T) {
	run := func(seed uint64) bool {
		s := generate(t, seed)
		if *keep != "" {
			var at []int
			for _, f := range strings.Split(*keep, ",") {
				i, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil {
					t.Fatalf("-oracle.keep: %v", err)
				}
				at = append(at, i)
			}
			s = s.Keep(at)
		}
		log, buf := zap.NewNop(), &syncBuffer{}
		if *logTo != "" {
			log = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), buf, zap.DebugLevel))
		}
		err := oracle.Execute(s, t.TempDir(), log)
		if *all {
			t.Logf("seed %d: %s: failed=%v", seed, s.Opts, err != nil)
		}
		if err == nil {
			return true
		}
		if *logTo != "" {
			if werr := os.WriteFile(*logTo, buf.bytes(), 0o644); werr != nil {
				t.Log(werr)
			}
		}
		t.Errorf("seed %d failed: %v\nschedule:\n%s", seed, err, s)
		short, serr := oracle.Shrink(s, err, t.TempDir(), 3, *shrink)
		t.Errorf("shortest failing schedule found (%d of %d steps):\n%s%v", len(short.Steps), len(s.Steps), short, serr)
		return false
	}
	if *duration > 0 {
		deadline := time.Now().Add(*duration)
		n := 0
		for seed := uint64(time.Now().UnixNano()); time.Now().Before(deadline); seed++ {
			n++
			if !run(seed) {
				break
			}
		}
		t.Logf("%d schedules of %d steps run", n, *steps)
		return
	}
	for seed := *first; seed < *first+uint64(*seeds); seed++ {
		if !run(seed) && !*all {
			return
		}
	}
}

// generate returns the schedule of seed, with the dimensions -oracle.dims
// forces, if any.
func generate(t *testing.T, seed uint64) *oracle.Schedule {
	oracle.DrawOpen, oracle.DrawLarge = *open, *large
	if *dims == "" {
		return oracle.Generate(seed, *steps)
	}
	if *dims == "none" {
		return oracle.GeneratePlain(seed, *steps)
	}
	d, err := oracle.ParseDims(*dims)
	if err != nil {
		t.Fatal(err)
	}
	return oracle.GenerateDims(seed, *steps, &d)
}

// regressions are shrunk schedules that once failed (seed, steps kept), each
// with what it found. Runs are not deterministic, so each is run a few times.
var regressions = []struct {
	seed  uint64
	keep  []int
	found string
}{
	{1795489570079366563, []int{1, 11, 12, 14, 17, 18},
		"a shared scope's wildcard set taken as complete while a do_not_cache resource was in it"},
	{1795489570079366563, []int{21, 24, 25, 31, 32, 33, 34, 35},
		"a SotW type subscribed again after it was dropped got nothing (the same request again)"},
	{7, []int{17, 18, 19, 25, 26, 27, 28, 29},
		"a wildcard subscriber after the linger never moved to its own scope (do_not_cache, Delta)"},
	{1795489570079366563, []int{2, 5, 8, 12, 13, 14, 15, 30, 31, 37},
		"an RDS response resent at the version the client had just ACKed"},
	{1795489570079366563, []int{10, 11, 12, 13, 14, 25, 26, 27, 28, 29},
		"a listener deleted while the relay restarted never removed: the new stream had not received it"},
	{1795492912555193232, []int{8, 9, 12, 13, 18, 19},
		"a TP2 Delta client's initial_resource_versions not taken for the variants it subscribes (make before break)"},
	{15, []int{2, 3, 4, 25, 28, 29, 37, 38, 39},
		"a halted rollout's version resent to the canary that NACKed it and still runs the version it accepted (its ACK was stale)"},
	{281, []int{0, 1, 2, 3, 4, 5, 6, 7, 10, 22, 25, 26, 27, 28},
		"a warm-restart file's cluster deleted upstream stayed in the wildcard set: a Delta upstream was not told of it (the wildcard came after a name)"},
	{281, []int{1, 2, 5, 7, 10, 22, 26, 27, 28, 30, 31, 32},
		"a canary's NACK of a bad version halted the good one that had joined its rollout since: the relay kept the accepted version for good"},
	{1007, []int{0, 1, 5, 6, 7, 8, 9, 37, 38, 39, 40, 42},
		"a cluster cached after its upstream subscription ended and deleted upstream meanwhile stayed in the wildcard set for good (a Delta server forgets what was unsubscribed)"},
	{1015, wholeSchedule(44),
		"a SotW CDS response resent at the version the client had just ACKed: a change built after its subscription changed had answered the new name before the subscription's own forced item (fails now and then; downstream's TestForcedItemAfterAChangeAnsweredIt always)"},
	{3004, []int{2, 4, 5, 8, 9, 22, 23, 26, 27, 28, 29, 30, 31, 32, 33, 36, 37, 38, 39},
		"a wildcard client moved to its own scope by a do_not_cache cluster never got the plain cluster that came with it"},
	{3021, []int{0, 1, 6, 7, 10, 22, 25, 26, 27, 28, 33, 34, 35, 36, 37, 38, 39, 40},
		"a wildcard client moved to its own scope by a do_not_cache cluster was never told of the clusters deleted in the same response"},
	{5001, wholeSchedule(42),
		"a cluster evicted and subscribed again before the upstream sender ran was never sent again: the Delta server still thought the relay held it (fails now and then; upstream's TestDeltaForgetThenSubscribe always)"},
	{16019, wholeSchedule(42),
		"a SotW canary that NACKed every CDS response for an unrelated bad cluster halted a good version: the relay served the older, bad one for good"},
	{17027, wholeSchedule(43),
		"a SotW CDS response resent at the version the client had ACKed: a stale request had dropped the cluster and the next stale one named it again before the response reached the client (fails now and then; downstream's TestStaleDropNamedAgainBeforeTheResponse always)"},
	{124, wholeSchedule(42),
		"a Delta response carrying a cluster just unsubscribed (it answered the older, named subscription) was taken for the wildcard's full set: a client moving in was told two clusters were gone (phantom loss)"},
	{276, wholeSchedule(42),
		"a warm-restart file's cluster deleted upstream stayed in the wildcard set: the SotW wildcard, added after a name, settled instead of being proven, and nothing compared the set with the last response (fails now and then; relay's TestWarmRestartSotWWildcardSettles always)"},
	{61008, []int{0, 2, 4, 5},
		"a SotW CDS full state without a cluster went out while the client still held a route to it: the route was deleted upstream, and a response of another route had made the stream forget the client held it"},
	{1029, wholeSchedule(43),
		"the relay's own UNAVAILABLE of a name nobody subscribed any more kept it from counting as gone: a wildcard client that brought it held it for good"},
	{281, wholeSchedule(44),
		"a halted rollout dropped the other changes of its upstream response: a Delta client was never told a cluster deleted in it was gone (fails about one run in ten; relay's TestRolloutDeltaHaltKeepsRemoval always)"},
	{100020, wholeSchedule(42),
		"a Delta canary's NACK of a response that carried only a bad cluster halted a good version of another that had joined the rollout earlier: the relay served that one's older, bad version for good (fails about one run in three; relay's TestRolloutDeltaHaltBlamesWhatTheNACKCarried always)"},
	{100020, []int{20, 21, 24, 25, 28, 37, 38},
		"a canary's NACK of a bad version halted the upstream's fix, which had joined the rollout and was still in the fan-out on its way to the canary: the relay served the older version for good (fails about one run in ten; relay's TestVerdictOnAnOlderViewIsNotAboutTheRollout always)"},
	{100098, []int{3, 5, 8, 12, 13, 14, 20, 21, 23, 30, 31, 32, 33, 36},
		"a SotW client's route the upstream deleted was taken for gone once an RDS response for another route went out: the CDS without the cluster it named reached the client before the LDS that dropped the route"},
	{300013, []int{0, 2, 3},
		"a SotW CDS response that crossed the request adding a TP2 key answered the older request; its variant of the name did not match the new key, which was taken for deleted (fails about one run in five; relay's TestInFlightResponseKeepsNewTP2Key always)"},
	{302527, wholeSchedule(42),
		"a cluster a client named and the wildcard covered, unsubscribed together with the wildcard and deleted upstream meanwhile, stayed in the wildcard set for good: a Delta server forgets what was unsubscribed (fails about one run in five; relay's TestUnsubscribedWithTheWildcardConfirmedAgain often)"},
	{100168, wholeSchedule(43),
		"a warm-restart file's listener, route and cluster deleted upstream while the relay was down were served for good: subscribed after the first request on the SotW upstream stream, their absence proved nothing and the cache trusted the file (fails now and then; relay's TestWarmRestartSotWNamedAfterFirstRequest always)"},
	{304488, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 35, 36, 37, 38, 39, 40, 41},
		"an unsure listener (its name's subscription had ended under the wildcard) was taken for deleted though the relay's new Delta stream had told the server it held it, so the server rightly said nothing (fails about one run in three without the fix of seed 100168; relay's TestWarmRestartDeltaToldIsSure the same for a warm-restart file)"},
	{308030, []int{0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34},
		"a SotW EDS response resent at the version the client had ACKed: a stale request had dropped the endpoints and the next stale one named them again before the response that carried them reached the client (fails about one run in three; downstream's TestStaleDropNamedAgainBeforeTheResponseEDS always)"},
	{308908, wholeSchedule(40),
		"a TP2 cluster's default variant, cached for subscriptions with parameters that had ended and deleted upstream meanwhile, stayed in the wildcard set for good: a Delta server forgets what was unsubscribed (relay's TestUnsubscribedTP2VariantConfirmedAgain always)"},
	{311154, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43},
		"a TP2 key's selection evicted took the wildcard set for incomplete: a Delta wildcard client reconnecting with its versions was never answered on CDS (fails about one run in three; relay's TestEvictTP2KeyKeepsTheWildcardComplete always)"},
	{405703, []int{0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42},
		"a Delta answer in flight when the relay dropped the CDS wildcard (and its last name) was ignored, but the server thought the relay held it: a cluster added meanwhile never came when \"*\" was subscribed again, and the wildcard set lacked it for good (fails rarely, under load; upstream's TestDeltaIgnoredAnswerIsForgotten always)"},
	{800299, wholeSchedule(42),
		"the oracle's mistake: a SotW canary that NACKed a bad version got the version it still ran, which the relay had sent to revert every canary when another canary's NACK halted the rollout, before it read this one's (fails about two runs in three without the fix)"},
	{800326, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41},
		"a warm-restart file's cluster deleted upstream stayed in the wildcard set for good: the relay declared it in the first request of a Delta stream that subscribed names only, and a forgetful server (go-control-plane) forgot it as soon as it answered them (fails about one run in four; relay's TestWarmRestartDeltaWildcardAfterAnsweredName always)"},
	{1101792, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41},
		"the oracle's mistake: a bad cluster still on its way to a picky canary when the schedule ended rode in one response with the last good versions, whose rollout its NACK halted; the last versions stayed held back (fails about three runs in four without the fix)"},
	{1200765, wholeSchedule(40),
		"a do_not_cache cluster a client dropped and named again before the relay's unsubscription went out: the server never heard of either and did not send it again, and the client was told it was gone (fails about one run in three; pre-existing)"},
	{1300250, wholeSchedule(20),
		"a TP2 name's plain selection evicted (its keys with parameters stayed) kept its variant stored: the next change of another variant selected it again, evicted and forgotten upstream, and its deletion upstream never reached it — a wildcard client kept it for good (fails about one run in two, pre-existing; found against the forgetful server)"},
	{1401575, wholeSchedule(40),
		"a warm-restart file's TP2 cluster, confirmed by the upstream, became unsure again when a subscription of it with parameters ended, and a wait for it armed before the confirmation took it for deleted: a restarted replica's wildcard clients were told it was gone while the upstream had it (fails about one run in twelve, pre-existing; relay's TestTP2KeyEndsAfterWarmRestartUnderTheWildcard always)"},
	{1701006, wholeSchedule(40),
		"a SotW client subscribed a route during a guarded rollout that held it: its released barrier, from an older View, answered the route with the version the rollout started with, and the subscription's own answer, from the newer View, took it for answered — the client kept the older route for good (fails about one run in three, pre-existing; found against the forgetful server; downstream's TestForcedItemAfterAnOlderAnswer always)"},
	{2200583, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43},
		"a listener cached while the SotW upstream stream had the wildcard, deleted upstream after the wildcard was dropped, then named by a gRPC client: served from the cache and trusted — a response without it proves nothing for a name the stream's first request did not have — and the client kept it for good (fails rarely, pre-existing; relay's TestWildcardMemberNamedAfterTheWildcard always)"},
	{3006725, wholeSchedule(40),
		"a TP2 cluster's answer in flight when its last subscription with parameters ended confirmed its plain selection, which no subscription covered any more: deleted upstream meanwhile, it was served to a wildcard Envoy from the cache and trusted — the client kept it for good (fails about one run in three, pre-existing; relay's TestInFlightTP2AnswerAfterItsKeyEnded always)"},
	{4101837, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41},
		"a replica's Delta upstream stream, new after a disconnect, added and dropped the listener wildcard before the server answered the listener type — it never would: the relay had declared the versions it held — and the end of the wildcard's wait ended the type's: its cache stayed unconfirmed for good, and a gRPC client that came from the other replica was never answered (fails about one run in two, pre-existing; found against the forgetful server; upstream's TestTypeSettlesAfterAWildcardCameAndWent always)"},
	{4401120, []int{0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 40, 41, 42, 43},
		"the oracle's accounting, not the relay: a TP2 client was served the cached default variant of a cluster before the upstream answered its own parameters (a caching proxy matches from the variants it holds), and told the cluster was gone once the upstream had none; the removal was judged by the variant its parameters select, which never had that content (fails about one run in two before the oracle's fix)"},
	{5100472, wholeSchedule(42),
		"the oracle's server, not the relay: asked to confirm the clusters a client brought under the wildcard, the relay subscribed them by name and unsubscribed them; the server forgot them instead of answering the unsubscription with each resource or its removal (xDS; go-control-plane does), so their deletion right after never reached the relay and a wildcard Envoy kept them for good (fails rarely, under load, before the oracle's fix; found against the forgetful server)"},
	{7101733, wholeSchedule(42),
		"after a warm restart, the SotW upstream's first CDS answer, to the one TP2 locator the request carried, pruned the file's default variant of the cluster, which it did not answer; a wildcard Envoy from elsewhere was sent an empty CDS (fails about one run in twenty, pre-existing; relay's TestWarmRestartVariantAnswerKeepsTheDefault always)"},
	{35, wholeSchedule(42),
		"a glob member deleted upstream while nothing subscribed the glob stayed cached — the default servers' listing pinned it — and the glob's next SotW subscriber was served it for good: the upstream client had forgotten it, so the SotW full state answering the glob again did not count as its deletion (fails now and then before the fix; relay's TestGlobMemberDeletedWhileUnsubscribed always)"},
	{35, []int{0, 1, 2, 3, 4, 10, 13, 14, 15, 16, 17, 18, 19, 20, 23, 24, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39},
		"the default servers listing a glob member its authority's stream had delivered was rolled out like an update; a canary's NACK halted it, and a SotW wildcard Envoy never got the member (fails about one run in three before the fix; relay's TestListingIsNotRolledOut always)"},
	{9741086, []int{5, 6, 9, 20, 23, 24, 25, 26},
		"a SotW Envoy from elsewhere held a route to a cluster whose default variant the upstream replaced by a constrained one: make before break held its CDS for a cluster it could not read, for good (relay's TestMakeBeforeBreakDanglingReferenceFromElsewhere always)"},
	{7009, []int{2, 5, 11, 12, 13, 16, 17, 18, 29},
		"the oracle's mistake: go-control-plane answers a relay's EDS request without names (it subscribes none) with every endpoint, which the relay ignores and ACKs; counted as the relay's state, it made a replica whose cached copy was behind look up to date, and its copy sent to a client from the other replica look like a rollback (fails about one run in four without the fix)"},
	{12, []int{21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41},
		"a glob member only the default servers had delivered, listed in their wildcard answer and then deleted, left the cache, but a Delta wildcard Envoy holding it was never told: the removal was held back for good, as if only its own authority could say (downstream's TestDeltaWildcardListedNameLeavesTheCache always)"},
	{11, []int{9, 13, 15, 16, 19, 20, 34, 35, 41, 42, 43},
		"the same as seed 12, in a node group with guarded rollouts and a SotW upstream"},
	{20, wholeSchedule(44),
		"the same as seed 12, with per-type Delta clients"},
	{4, wholeSchedule(43),
		"a glob member the default servers list came twice in one SotW CDS response to an Envoy subscribed to \"*\" and the glob (downstream's TestSotWWildcardAndGlobCarryAListedMemberOnce always); and, moved to its own scope by a do_not_cache cluster, a SotW Envoy from elsewhere had its CDS held for good: the own scope's stream told the glob's server the relay held the listed member, which it then never sent, so the glob never counted as answered (fails about one run in three before that fix; relay's TestMovedToOwnScopeListedMemberNotSeeded always)"},
	{1018, wholeSchedule(42),
		"a glob member the default servers had listed (the wildcard's subscription since ended) stayed cached when its own authority answered the glob without it, and a glob client was served it for good (relay's TestGlobMemberListedByTheDefaultServersDeletedByItsAuthority always); and a member loaded from the warm-restart file was no glob's member, so the glob's answer never removed it (relay's TestWarmRestartGlobMember always) (fails about one run in two before the fixes)"},
	{1022, wholeSchedule(42),
		"a Delta wildcard Envoy that moved in bringing a glob member the default servers no longer listed was never told it was gone: the wildcard's answer skipped every xdstp name (downstream's TestDeltaWildcardBroughtUnlistedName always; fails about two runs in three before the fix)"},
	{1011, wholeSchedule(42),
		"a SotW answer of a glob on its authority's stream, older than the default servers' listing that had just delivered a new member, removed that member from a Delta wildcard Envoy while the upstream had it (phantom loss; fails about one run in two with the branch's first fix of seed 1018, never before it)"},
	{2037, wholeSchedule(42),
		"a glob member its authority's stream had delivered kept that content for good once the glob's subscription ended, though the default servers listed its changes: a SotW wildcard Envoy never got them (relay's TestListedMemberFollowsTheListingOnceTheGlobEnds always)"},
	{36, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 42},
		"a TP2 locator of an Envoy-spelled name (…/svc%3A16) was subscribed upstream canonically (…/svc:16), which the server does not hold: the client was never answered (fails always before the fix; relay's TestTP2EnvoySpelledLocator always)"},
	{3029, wholeSchedule(42),
		"a Delta client of a glob that moved in bringing members the upstream had deleted kept them for good: the glob's set was empty, the Delta server's answer carried nothing (the oracle's server did not name the empty glob in removed_resources, as xDS TP1 has it; the relay took no such removal as the set's answer), so the glob never counted as answered (fails about one run in two before the fix; relay's TestGlobClientFromElsewhereEmptyGlob always)"},
	{5017, wholeSchedule(46),
		"a gRPC SotW client subscribed to a glob alone, moved in holding its two members, which the upstream then deleted, was never answered: with no member present the relay took the glob for \"nothing known yet\", though the upstream had answered its set (fails every run before the fix; relay's TestGlobClientFromElsewhereEmptyGlob/sotw-glob-only-elsewhere always)"},
	{6204, []int{0, 1, 6, 7, 8, 9, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39},
		"a glob member the default servers had listed (their wildcard since unsubscribed) and its Delta authority then deleted was served to a new client of the glob for good: the authority's first request never declared it (fails now and then; relay's TestGlobMemberListedByTheDefaultServersDeletedByItsAuthority/delta always)"},
	{6221, wholeSchedule(42),
		"a glob member from the warm-restart file, deleted upstream, was kept for good by a Delta client whose stream moved to its node's own scope: the own View never had it, and only members the client brought were checked against the glob's answered set (fails now and then; downstream's TestDeltaGlobMemberMissingFromAnotherView always)"},
	{7139, wholeSchedule(42),
		"a SotW wildcard answer, in a TP2 world whose cluster's unconstrained variant had been replaced, crashed the relay: the answer's check of whether a plain name is in the wildcard set read a View entry the name did not have (nil)"},
	{2019, []int{40},
		"a Delta wildcard Envoy was sent …/svc:4, the relay's canonical name, for the default servers' listed …/svc%3A4: the upstream client kept no record of how the server spelled a name no client spelled (fails always before the fix; relay's TestEnvoySpelledListedName always)"},
	{2028, []int{22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43},
		"the same as seed 2019 in a TP2 world; and a SotW TP2 client of …/svc%3A19 was sent resource_name …/svc:19, the relay's canonical name, around the upstream's bytes named …/svc%3A19 (fails always before the fixes; relay's TestTP2EnvoySpelledLocator always)"},
	{4010, wholeSchedule(22),
		"the same as seed 2019 with a warm-restart file and a forgetful server"},
	{30308, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39},
		"a SotW client of an Envoy-spelled name (…/svc%3A16), moved from its group scope to its node's own scope by the do_not_cache resource, was subscribed there canonically (…/svc:16), which the server does not hold: it was never answered (fails always before the fix; relay's TestEnvoySpelledNameMovedToOwnScope always)"},
	{70091, wholeSchedule(46),
		"a SotW EDS client that moved in was sent the View's version of a changed name it had brought, then sent it again once the upstream confirmed the View: a changed name sent left it among the brought names that wait for confirmation (a resend the client did not ask for)"},
	{81451, wholeSchedule(42),
		"a Delta Envoy that moved in from an up-to-date replica was sent this replica's older route: its subscription had ended and the upstream changed it meanwhile, and the no-rollback check asked only whether the authority's upstream was live, not whether the cached copy was unsure (fails about two runs in three before the fix; relay's TestNoRollbackFromUnsureCopy always)"},
	{80719, wholeSchedule(44),
		"the same as seed 81451 for a TP2 variant: a SotW gRPC client of c2{env=prod} that came back to a replica was sent the variant as that replica had cached it before the key's subscription ended (fails every run before the fix; relay's TestNoRollbackFromUnsureTP2Variant always)"},
	{81638, wholeSchedule(44),
		"the same as seed 81451 for a REST poller: a poll with a version was answered with endpoints the relay had cached before their subscription ended, older than the poller's (fails about one run in three before the fix; rest's TestPollNoRollbackFromUnsureCopy always)"},
	{90346, []int{5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43},
		"a glob member cached after the glob's subscription ended (a do_not_cache cluster had moved its client to its node's own scope) and deleted upstream meanwhile was served for good to the glob's next Delta client: the Delta server had forgotten it with the glob and, the glob subscribed again on the same stream, said nothing of it (fails every run before the fix, the whole schedule about one run in two; relay's TestGlobMemberDeletedWhileUnsubscribed/delta-same always)"},
	{80823, wholeSchedule(43),
		"a Delta relay NACKed its new stream's first Listener answer and the upstream, which sends again only on a change, said nothing more: the Listener cache stayed unconfirmed for good — a SotW gRPC client from another replica was never answered on LDS, nor on CDS (c24), which waited for the listener it could not read, and a SotW wildcard Envoy kept a listener deleted upstream (fails about one run in two before the fix; upstream's TestNACKedAnswerAskedAgainOnANewStream always)"},
	{5039, wholeSchedule(42),
		"a SotW wildcard Envoy was sent a CDS without an Envoy-spelled cluster of another authority the default servers had listed while its route still referred to it: make before break kept only names of the default authority (fails about one run in two before the fix; downstream's TestSotWListedNameKeptWhileARouteRefersToIt always)"},
	{5016, wholeSchedule(42),
		"a do_not_cache Envoy-spelled cluster of another authority the default servers listed was dropped by the group scope, which left the wildcard clients there: they never got it (fails every run before the fix; relay's TestDoNotCacheListedNameOfAnotherAuthority always)"},
	{5304, wholeSchedule(43),
		"a Delta relay confirmed the forgotten members of the wildcard it subscribed again by asking for them with it, and asked for an Envoy-spelled cluster of another authority the default servers listed by its canonical name: the server, which matches names exactly, said that name was gone and the wildcard clients were told the cluster was (fails every run before the fix; upstream's TestDeltaForgottenMemberConfirmedAsSpelled always)"},
	{5026, wholeSchedule(42),
		"a SotW relay took an authority's full-state answer to a TP2 key (the env=prod variant of an Envoy-spelled cluster the default servers listed) as the answer to the plain name, which the stream did not subscribe, and pruned the default variant the default servers had listed: a wildcard Envoy was told the cluster was gone (fails about one run in four before the fix; upstream's TestSotWTP2KeyAnswersNotThePlainName always)"},
	{5261, wholeSchedule(42),
		"a Delta gRPC client that moved to the other replica, bringing an Envoy-spelled cluster of another authority at its newest version, was sent the replica's older copy, cached by a TP2 key's subscription since ended: the same as seed 81451 (6 runs of 9 failed before the merge of k-delta, 0 of 20 after)"},
	{92056, wholeSchedule(44),
		"a Delta Envoy that moved in holding a newer glob member was sent the relay's older copy, unsure since the glob's subscription ended, 2 ms before the upstream's removal: the new stream's first request declaring it had confirmed it as soon as it was built, before the server answered (fails about one run in two before the fix; relay's TestGlobMemberDeclaredStaysUnsureUntilAnswered always)"},
	{5502, wholeSchedule(44),
		"a Delta gRPC client that moved in holding the newest env=prod variant of an Envoy-spelled endpoint was sent the relay's older one: its key, subscribed again, was answered from a variant stored since the key's evicted selection, as if confirmed (relay's TestNoRollbackFromEvictedTP2Selection always); then a wildcard Envoy was told a cluster the default servers listed was gone: a SotW authority stream reported the name of a TP2 key it had unsubscribed as deleted (upstream's TestSotWUnsubscribedTP2KeyRemovesNothing always); and, about one replay in nine, a Delta Envoy of the wildcard was sent an older g/m9 than it held: the authority's SotW stream, behind, answered the glob after its subscription had ended (the type still subscribed by TP2 keys), and the answer replaced the copy the default servers' live wildcard listed (relay's TestLateGlobAnswerDoesNotReplaceTheListing always)"},
	{5451, wholeSchedule(44),
		"a SotW wildcard Envoy was told an Envoy-spelled cluster the default servers listed was gone while its route still referred to it: make before break kept it in the first CDS response after the upstream dropped it, not in the next (downstream's TestSotWListedNameKeptWhileARouteRefersToIt/2_CDS_changes always)"},
	{5425, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 30, 31, 32, 33, 34},
		"a glob member its authority's stream had delivered and the default servers listed, deleted while the relay was away from the Delta default servers (the glob's subscription ended meanwhile), was kept for good by a Delta wildcard Envoy: the default stream's new first request declared only the default authority's names, so the server never said the member was gone (fails every run before the fix; relay's TestListedMemberDeclaredToTheDefaultServers always)"},
	{5490, wholeSchedule(43),
		"the same as seed 5425 with a SotW wildcard Envoy, a warm-restart file and a forgetful server (fails about three runs in four before the fix, the shrunk schedule about one run in six)"},
	{5497, wholeSchedule(43),
		"a glob member the Delta default servers stopped listing while its glob's subscription still covered it stayed cached, unlisted, once the glob ended; a Delta wildcard Envoy that moved in holding it was sent the removals of the other names the default servers no longer listed, never of that one: a cached name was taken for one the wildcard covers (fails about one run in three before the fix; relay's TestUnlistedMemberRemovedForWildcardFromElsewhere always)"},
	{5530, wholeSchedule(44),
		"a Delta wildcard Envoy that moved in holding glob members the default servers list was never sent their newer copies: the authority's stream had ended while nothing subscribed it, and the default servers' copies, confirmed by their live stream, were judged by the names' authority, unconfirmed for good (fails about one run in two before the fix; relay's TestListedMemberFromTheDefaultServersNotHeldForItsAuthority always)"},
	{5585, wholeSchedule(42),
		"a SotW wildcard Envoy kept an older glob member for good: the Delta default servers' newer listing came while the lingering glob still covered it and its authority's stream was down, was taken as a listing only, and the glob ended before the authority came back; the default servers never sent it again (fails about one run in ten before the fix; relay's TestListingKeptAsideWhileItsAuthorityIsDown always)"},
	{160673, []int{3, 5, 11, 15, 16, 17, 20, 21, 33},
		"a SotW Envoy that came back to a restarted relay (warm-restart file) was sent a CDS without c2 while its own route r15 still referred to it: the relay withheld its newer, unsure r15 (no rollback), and make before break took that unsent copy for the one the client held (fails about three runs in four before the fix; downstream's TestSotWCDSWaitsForARouteWithheldFromElsewhere always); and, on a loaded machine, the CDS went once Options.AnswerWait had passed while the relay still waited for its upstream's word on r15 (fails 8 of 30 runs with the process stopped at random for up to 1.5 s before that fix, 0 of 30 after; downstream's TestSotWClustersWaitForTheWordOnAnUnsureRouteTheStreamCannotRead always)"},
	{160079, wholeSchedule(49),
		"the upstream sent a snapshot's CDS without c1 before its RDS that moved r5 off c1; a gRPC client that had moved to the replica, holding c1 from elsewhere, was sent the CDS without c1 past the reconnect's grace while the move of r5 sat queued right behind it (fails about one run in fifty, under the race detector, before the fix; downstream's TestSotWBreakFirstFromElsewhereWaitsForTheQueuedMove always)"},
	{170919, wholeSchedule(42),
		"the same as seed 160673 with a Delta upstream and the authority's own servers: a SotW Envoy that came back to a restarted relay was sent a CDS without c1 while its own route r5 still referred to it (failed on the binary before the m-persist merge, passes 3 of 3 after)"},
	{200286, wholeSchedule(43),
		"a REST poller that NACKed a CDS answer before its relay restarted was held for good by the restarted relay, which remembered nothing of what it had sent and took the first version it found for the rejected one, while the world had changed since (fails every run before the fix; rest's TestPollNACKWithNothingRemembered always)"},
	{172663, wholeSchedule(43),
		"a gRPC client on per-type streams that moved to the other replica, naming c2 and bringing its CDS version, was sent the replica's copy of c2, older than its own: cached as a member of the wildcard set whose subscription had ended (a do_not_cache cluster had moved the wildcard client to its own scope), so unsure, but a SotW full-state response asked only whether the authority was confirmed (fails about one run in three before the fix; relay's TestSotWNoRollbackFromUnsureWildcardMember always)"},
	{180443, wholeSchedule(46),
		"a Delta wildcard Envoy moved to its node's own scope by a do_not_cache cluster kept a glob member the default servers had listed, which the upstream deleted: its own View, not seeded with another authority's name, never listed it as changed, so the stream never looked at it again (fails about one run in two before the fix; relay's TestDoNotCacheMoveUnlistsAnotherAuthoritysName always)"},
	{180351, wholeSchedule(46),
		"a gRPC client that came back to a restarted relay with the CDS version it held elsewhere was never sent the glob's members: when the default servers' wildcard subscription ended (a do_not_cache cluster had moved the wildcard client to its own scope), the members they listed were marked unsure although the glob's own stream still confirmed them, and the client, held back while a name it subscribes is unsure, waited for good (fails about one run in six before the fix; relay's TestListedMemberStaysSureWhileItsGlobIsSubscribed always)"},
	{5496, wholeSchedule(42),
		"a SotW Envoy of the wildcard and a glob was sent an older g/m9 than it held: the glob's Delta stream had delivered m9's newer copies and then its deletion, and the Delta default servers, behind, listed an older copy after that; not cached any more, the name was stored as the default servers' copy (fails about one run in twenty before the fix, its replay 4 of 10 times; relay's TestListingAfterItsAuthorityDeletedItIsNotARollback always)"},
	{190215, wholeSchedule(46),
		"a SotW wildcard Envoy that came back to a replica kept a glob member the default servers had listed and its authority had deleted: left unsure when the wildcard's subscription ended while the default servers' stream was down, it was asked of its authority's servers once the wildcard came back on the default servers' new stream, whose subscriptions did not cover it, and that silence kept it for good; the default servers, whose wildcard alone covered it, were never asked (fails about one run in five before the fix; relay's TestListedMemberAskedOfTheDefaultServers always); and, under load, the default servers' answer in flight when the wildcard ended confirmed the member it listed, which they then forgot (2 of 100 runs under -race before that fix; relay's TestInFlightWildcardAnswerAfterItsExpiry always)"},
	{210205, []int{0, 1, 2, 3, 4, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39},
		"a glob member the default servers list, left unsure when its glob's subscription ended, was never confirmed again — the default servers think the relay holds it — and, with its authority's stream back from a fallback server, stale for good: a REST wildcard poller that held config waited for good (fails about two runs in three before the fix; rest's TestPollWildcardAnsweredOnceAListedGlobEnds always)"},
	{221355, wholeSchedule(44),
		"a picky SotW Envoy from elsewhere rejected a cluster whose default variant the upstream then replaced by a constrained one while its own route still referred to it: make before break kept the cluster at the version the client had rejected, not the one it held, so the client rejected every later CDS whole and never got the new clusters (fails every run before the fix; downstream's TestSotWKeptClusterIsTheVersionTheClientAccepted always)"},
	{221757, wholeSchedule(42),
		"the oracle's mistake: go-control-plane in ADS mode dropped a relay's RDS watch for [r5 r7] unanswered when a new listener's r14 came, and answered no later RDS on that stream; the slow Envoy that would have asked for r14 left first, so the relay never asked again and its clients kept r7 (fails about one run in two on a loaded machine without the fix; TestGCPKeepsADroppedWatch always)"},
	{260000, wholeSchedule(44),
		"a SotW Envoy that came back to its relay held r8, referring to svc%3A22, another authority's cluster its wildcard CDS had given it while the default servers listed it; they listed it no more and the upstream's move of r8 came 2 ms later, but the CDS answer was sent at once without svc%3A22: make before break looked only at names the wildcard selects by their own name (the seed failed 6 of 12 runs before the fix, this entry 4 of 4 replays; downstream's TestSotWListedClusterFromElsewhereWaitsForTheRouteMove always)"},
	{320181, wholeSchedule(45),
		"a REST poller of the wildcard and a glob that reconnected holding config was never answered again: its glob's members were all gone, and the authority, a SotW server, answered the glob subscribed again mid-stream with no member, which proves nothing on SotW (the response may answer the request before), so the glob's set stayed unanswered for good (fails every run before the fix; upstream's TestSotWEmptyGlobAddedMidStreamAskedOnANewStream always)"},
	{253808, wholeSchedule(44),
		"a Delta Envoy of the wildcard and a glob was sent an older g/m10 than it held: the SotW default servers' newer listing replaced their own older copy while the authority's answer to the glob, built before the change and on another stream, was still on its way, and that answer then replaced the listing (fails about one run in thirty before the fix; relay's TestListingKeptAsideWhileTheGlobIsUnanswered always)"},
	{320306, wholeSchedule(43),
		"a picky SotW Envoy that moved to a restarted relay rejected every CDS response there (a bad svc%3A10), so it held only what it brought; the upstream replaced svc%3A10's default variant while its own route r15 still named it, and make before break kept the copy the client had rejected, found in the response last sent as no ACK here said otherwise, so the client rejected every later CDS whole, the last good one too (fails every run before the fix; relay's TestMakeBeforeBreakKeepsNoRejectedCopy always)"},
	{360455, wholeSchedule(43),
		"a Delta Envoy that moved to a replica whose SotW upstream had been down was sent its copy of c2's endpoints from before the outage, older than the one it brought: the upstream had changed and then deleted c2 meanwhile, and the first EDS response on the replica's new stream, without c2, confirmed every cached name of the type (fails about one run in five before the fix; relay's TestSotWNoRollbackAfterReconnect always)"},
	{360195, wholeSchedule(47),
		"the oracle's mistake: a SotW Envoy of the wildcard and a glob moved to relay-A2 holding g/m11 at the content its sibling had applied and was sent relay-A2's older copy, judged a rollback: relay-A2's two upstream streams (the default servers' and the authority's, which has no servers of its own) shared one window, and the default stream's acknowledgement of the newer state (a listing of g/m11 the relay does not store while the authority speaks for it) counted for the authority's stream, which had rejected its answer of that state as invalid; on 5cd9342 the same for c19 the other way round (about one run in five before the fix; TestWindowsPerAuthorityStream always)"},
	{371137, wholeSchedule(42),
		"a SotW CDS client that moved to a replica named c1 plainly while another client's c1{env=prod} kept the name in TP2 variant mode, and the upstream had no default variant: the Delta upstream's removed_resources of c1 dropped only the (missing) unconstrained variant and never recorded the plain name absent, so the client, held until the relay had the upstream's word on c1, waited for good (fails every run before the fix; relay's TestTP2PlainNameGoneInVariantModeAnswersClientFromElsewhere always)"},
	{440797, wholeSchedule(44),
		"a gRPC Delta client that came back to a replica bringing c12 (do_not_cache), unsubscribed it and subscribed it again was never sent it: the stream still took c12 for brought from elsewhere, withheld the own scope's unsure copy as a rollback, and dropped the withheld name as settled once the upstream confirmed it, the client holding nothing (fails 5 of 6 runs before the fix; downstream's TestDeltaResubscribedAfterBroughtGetsTheName always)"},
	{462738, wholeSchedule(43),
		"a wildcard Delta Envoy, a canary of a glob member's new version that its authority sent, rejected the response that carried it (a bad cluster beside it): the halted rollout put back the accepted copy as it stood when the authority sent it, before the default servers listed the member, so unlisted, and the client was told the member was gone while both servers had it (phantom loss; fails 11 of 83 runs before the fix; relay's TestHaltedRolloutKeepsTheListing always)"},
	{471451, wholeSchedule(46),
		"a SotW gRPC client that came back to a restarted replica while the upstream was down, holding l5 -> r6 -> c1, was sent the CDS without c1 (deleted upstream) before the RDS that moved r6 off it: the wait for a route the stream cannot read had started at the first look during the outage, when the CDS carried only c1's UNAVAILABLE error, and was over when the upstream came back (more than AnswerWait later on a loaded machine) and answered CDS before RDS (fails 0 of 155 runs before the fix, 10 of 10 with the quiesce 3 s later, 0 of 20 of those after; downstream's TestSotWClustersFromElsewhereWaitForTheRouteAfterAnOutage always)"},
	{512023, wholeSchedule(44),
		"an Envoy REST poller of the wildcard CDS that held xdstp://auth/…/svc:16 was never sent c23: when svc:16's subscription by name at its authority ended, the name was marked unsure although the default servers' live wildcard listed it, and nothing would ever confirm it again — they think the relay holds it — so every poll with a version was held (fails 6 of 6 runs before the fix; rest's TestPollWildcardAnsweredOnceAListedNameEnds always)"},
	{570443, wholeSchedule(43),
		"wildcard Delta Envoys of a replica kept l6, deleted while the forgetful Delta upstream was down, for good: as the replica's new stream started, l6's subscription by name ended (a gRPC client had left), and the upstream client, told to forget l6, left it out of the first request's initial versions although the cache kept it, unsure, under the wildcard — the server never spoke of it again (fails 3 of 700 runs before the fix, on a loaded machine; upstream's TestForgottenNameStillCachedIsDeclaredOnANewStream always)"},
	{573610, wholeSchedule(46),
		"a SotW gRPC client of a glob that came back to a restarted relay, holding g/m8 (deleted upstream meanwhile), was never sent CDS: g/m9, cached from the default servers' listing and left to its authority once their wildcard ended, was declared to the authority's new stream and confirmed, then marked unsure again by the default servers' new stream, which no longer listed anything and would never speak of it, so the client from elsewhere was held for good (fails 2 of 11 runs before the fix; relay's TestLapsedListingIsNotTheDefaultServersToConfirm always)"},
	{580335, wholeSchedule(47),
		"a wildcard SotW Envoy that held xdstp://auth/…/svc%3A10 at its authority's newer copy was sent the older one: a TP2 client's key kept the name in variant mode, and the default servers' listing, on a stream not ordered with the authority's and behind it, was stored as its default variant, although a subscription of the authority covered the name (fails 9 of 21 runs before the fix; relay's TestListingInVariantModeIsNotARollback always)"},
}

// drawn in foundDims: the regression was found with the dimensions its seed
// draws (a soak's schedule), which forcing them does not give again.
const drawn = "drawn"

// foundDims: the dimensions of the regressions found in a widened world
// (as -oracle.dims spells them, or drawn); the others are plain schedules.
var foundDims = map[uint64]string{35: "glob,foreign", 9741086: "replace", 7009: "gcp",
	4: "glob,foreign", 11: "glob,foreign", 12: "glob,foreign", 20: "glob,foreign", 1018: "glob,foreign", 1022: "glob,foreign",
	1011: "glob,foreign", 2037: "glob,auth-servers,foreign", 36: "auth-servers,escaped,replace", 3029: "glob,foreign",
	5017: "glob,auth-servers,invalid,foreign", 7139: drawn, 70091: drawn, 6204: "glob,foreign", 6221: "glob,foreign",
	2019: "glob,auth-servers,invalid,escaped,foreign", 2028: "auth-servers,invalid,escaped,replace,foreign", 4010: "escaped,foreign",
	30308: "auth-servers,escaped", 81451: drawn, 80719: drawn, 81638: drawn, 90346: drawn, 80823: drawn, 92056: drawn,
	5039: "escaped,foreign,glob", 5016: "escaped,foreign,glob", 5304: "escaped,foreign,glob", 5026: "escaped,foreign,glob", 5261: "escaped,foreign,glob",
	5502: "escaped,foreign,glob", 5451: "escaped,foreign,glob", 5496: "escaped,foreign,glob",
	5425: "escaped,foreign,glob", 5490: "escaped,foreign,glob", 5497: "escaped,foreign,glob", 5530: "foreign,glob", 5585: "foreign,glob",
	160673: drawn, 160079: drawn, 170919: drawn, 172663: drawn, 200286: drawn,
	180443: "glob,invalid,replace,foreign", 180351: "glob,auth-servers,silence,foreign",
	190215: "glob,auth-servers,silence,foreign",
	210205: "glob,auth-servers,escaped,foreign,rest", 221355: "replace", 221757: "gcp",
	253808: drawn, 260000: "auth-servers,silence,escaped,foreign", 320181: "glob,auth-servers,invalid,rest",
	320306: "escaped,replace,foreign", 360195: drawn, 371137: drawn, 440797: drawn, 462738: drawn, 471451: drawn, 512023: drawn,
	570443: drawn, 573610: drawn, 580335: drawn}

// foundForgetful: the regressions found against the forgetful Delta server
// (Options.Forgetful); the others were found before it existed.
var foundForgetful = map[uint64]bool{800326: true, 1300250: true, 1701006: true, 4101837: true, 5100472: true, 2019: true, 4010: true,
	6221: true, 81451: true, 80719: true, 5016: true, 5261: true, 5490: true, 5497: true, 5585: true,
	160673: true, 160079: true, 180443: true, 180351: true, 190215: true, 221355: true, 260000: true, 440797: true, 462738: true,
	570443: true}

// wholeSchedule returns the step numbers 0..n-1: a whole generated schedule.
func wholeSchedule(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestOracleRegressions replays the shrunk schedules of bugs the oracle found.
func TestOracleRegressions(t *testing.T) {
	for _, r := range regressions {
		if *only != 0 && r.seed != *only {
			continue
		}
		s := oracle.GeneratePlain(r.seed, 40)
		if dims := foundDims[r.seed]; dims == drawn {
			s = oracle.Generate(r.seed, 40)
		} else if dims != "" {
			d, err := oracle.ParseDims(dims)
			if err != nil {
				t.Fatal(err)
			}
			s = oracle.GenerateDims(r.seed, 40, &d)
		}
		s = s.Keep(r.keep)
		s.Opts.Forgetful = foundForgetful[r.seed] // as they were found
		for range 3 {
			log, buf := zap.NewNop(), &syncBuffer{}
			if *logTo != "" {
				log = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), buf, zap.DebugLevel))
			}
			if err := oracle.Execute(s, t.TempDir(), log); err != nil {
				if *logTo != "" {
					_ = os.WriteFile(*logTo, buf.bytes(), 0o644)
				}
				t.Errorf("%s: %v\nschedule:\n%s", r.found, err, s)
				break
			}
		}
	}
}

// syncBuffer is a log sink for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Sync() error { return nil }

func (s *syncBuffer) bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}
