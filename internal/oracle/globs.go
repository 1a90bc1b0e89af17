package oracle

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
)

// The second authority of the world and its glob collection of clusters.
const (
	authority   = "auth"
	globPrefix  = "xdstp://" + authority + "/envoy.config.cluster.v3.Cluster/g/"
	globName    = globPrefix + "*"
	maxMembers  = 4
	initMembers = 2
)

// inGlob reports whether name is a direct member of the glob collection
// glob, as a control plane matches them: by the text of the name.
func inGlob(glob, name string) bool {
	rest, ok := strings.CutPrefix(name, strings.TrimSuffix(glob, "*"))
	return ok && rest != "" && !strings.Contains(rest, "/") && name != glob
}

// foreign reports whether name belongs to another authority than the
// default servers' (an xdstp name): the default servers' wildcard answer
// does not list it.
func foreign(name string) bool { return keying.IsXDSTP(name) }

// initGlob gives the model its first glob members.
func (m *model) initGlob() {
	m.members = map[string]int{}
	for range initMembers {
		m.addMember()
	}
}

func (m *model) addMember() string {
	n := m.name(globPrefix + "m")
	m.members[n] = m.content()
	return n
}

// mutateMembers adds, deletes or changes a glob member.
func (m *model) mutateMembers(rng *rand.Rand) string {
	ms := slices.Sorted(maps.Keys(m.members))
	switch k := rng.IntN(3); {
	case k == 0 && len(ms) < maxMembers || len(ms) == 0:
		return "member " + m.addMember() + " added"
	case k == 1:
		n := ms[rng.IntN(len(ms))]
		delete(m.members, n)
		return "member " + n + " deleted"
	default:
		n := ms[rng.IntN(len(ms))]
		m.members[n] = m.content()
		return "member " + n + " changed"
	}
}

// memberCluster is a glob member's content: nothing refers to it, and it
// refers to nothing.
func memberCluster(name string, gen int) *Res {
	x := xdstest.EDSCluster(name, name)
	x.ConnectTimeout = durationpb.New(time.Duration(gen) * time.Millisecond)
	return newRes(keying.ClusterType, name, "", x, nil)
}

// expandGlobs adds to out the members of the globs among st's keys.
func expandGlobs(snap *Snapshot, typeURL string, st *usub, out map[string]*Res) {
	for k := range st.keys {
		if !keying.IsGlob(k) {
			continue
		}
		for n, vs := range snap.Res[typeURL] {
			if inGlob(k, n) && len(vs) > 0 {
				out[n] = snap.Select(typeURL, n, "")
			}
		}
	}
}

// coveredByGlob reports whether one of st's glob keys covers name.
func (st *usub) coveredByGlob(name string) bool {
	for k := range st.keys {
		if keying.IsGlob(k) && inGlob(k, name) {
			return true
		}
	}
	return false
}

// dropUncovered forgets what the stream held of the members no glob and no
// wildcard covers any more (a glob unsubscribed).
func (st *usub) dropUncovered() {
	for k := range st.held {
		if _, named := st.keys[k]; !named && foreign(k) && !st.wildcard && !st.coveredByGlob(k) {
			delete(st.held, k)
			delete(st.heldEnv, k)
		}
	}
}

// globsCover reports whether one of the client's globs of t covers name.
func (ct *ctype) globsCover(name string) bool {
	for g := range ct.globs {
		if inGlob(g, name) {
			return true
		}
	}
	return false
}

func (s ClientSpec) globString() string {
	if s.Glob {
		return " glob"
	}
	return ""
}

// emptyGlobs returns the globs that cover no name of sel.
func emptyGlobs(sel map[string]*Res, globs []string) []string {
	var out []string
	for _, g := range globs {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(sel)), func(k string) bool { return inGlob(g, k) }) {
			out = append(out, g)
		}
	}
	return out
}
