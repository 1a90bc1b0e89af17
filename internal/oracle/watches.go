package oracle

import (
	"strings"
	"sync"
	"time"

	"github.com/xds-relay/xds-relay/keying"
)

// watchBook records, per relay instance, since when its clients have
// watched each name without a break. A relay evicts only what none of its
// clients watches (relay/evict.go), and may drop a name upstream unseen by
// the upstream (on a new stream, or dropped and added again between two
// requests): a name watched throughout since the relay was told of it is
// one it still knows. All methods are safe for concurrent use.
type watchBook struct {
	mu      sync.Mutex
	since   map[string]map[string]*watched // instance → "type name" ("type *": the wildcard) → its watchers
	clients map[*Client]clientWatch        // what each client watches
}

// watched is one name's watchers on one relay instance and since when it
// has had one.
type watched struct {
	by    map[*Client]bool
	since time.Time
}

// clientWatch is what one client watches: its keys on one relay instance.
type clientWatch struct {
	instance string
	keys     map[string]bool
}

// set records that c, a client of relay instance, watches names (and the
// wildcard if wildcard) of typeURL, and nothing else of it.
func (b *watchBook) set(c *Client, instance, typeURL string, names []string, wildcard bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cw := b.clients[c]
	if cw.instance != instance {
		b.dropLocked(c)
		cw = clientWatch{instance: instance, keys: map[string]bool{}}
	}
	want := map[string]bool{}
	for _, n := range names {
		want[typeURL+" "+n] = true
	}
	if wildcard {
		want[typeURL+" "+keying.Wildcard] = true
	}
	for k := range cw.keys {
		if strings.HasPrefix(k, typeURL+" ") && !want[k] {
			b.unwatchLocked(instance, k, c)
			delete(cw.keys, k)
		}
	}
	for k := range want {
		b.watchLocked(instance, k, c)
		cw.keys[k] = true
	}
	if b.clients == nil {
		b.clients = map[*Client]clientWatch{}
	}
	b.clients[c] = cw
}

// drop records that c watches nothing (its streams ended).
func (b *watchBook) drop(c *Client) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropLocked(c)
}

func (b *watchBook) dropLocked(c *Client) {
	cw := b.clients[c]
	for k := range cw.keys {
		b.unwatchLocked(cw.instance, k, c)
	}
	delete(b.clients, c)
}

func (b *watchBook) watchLocked(instance, key string, c *Client) {
	if b.since == nil {
		b.since = map[string]map[string]*watched{}
	}
	if b.since[instance] == nil {
		b.since[instance] = map[string]*watched{}
	}
	w := b.since[instance][key]
	if w == nil {
		w = &watched{by: map[*Client]bool{}}
		b.since[instance][key] = w
	}
	if len(w.by) == 0 {
		w.since = time.Now()
	}
	w.by[c] = true
}

func (b *watchBook) unwatchLocked(instance, key string, c *Client) {
	if w := b.since[instance][key]; w != nil {
		delete(w.by, c)
	}
}

// unwatchedAfter reports whether there may have been a moment after at when
// no client of relay instance watched name of typeURL, by name or by the
// wildcard: then the relay may have evicted it since.
func (b *watchBook) unwatchedAfter(instance, typeURL, name string, at time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range []string{typeURL + " " + name, typeURL + " " + keying.Wildcard} {
		if w := b.since[instance][k]; w != nil && len(w.by) > 0 && !w.since.After(at) {
			return false // watched throughout since at
		}
	}
	return true
}
