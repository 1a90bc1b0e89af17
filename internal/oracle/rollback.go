package oracle

// Older reports whether content older of the variant (name, env) of typeURL
// is older than content newer: the upstream last published older before it
// first published newer. Content published again later is not older.
func (w *World) Older(typeURL, name, env, older, newer string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	o, ok1 := w.spans[pubKey(typeURL, name, env, older)]
	n, ok2 := w.spans[pubKey(typeURL, name, env, newer)]
	return ok1 && ok2 && o[1] < n[0]
}

// CurrentAt reports whether the variant (name, env) of typeURL had content
// hash at index.
func (w *World) CurrentAt(typeURL, name, env, hash string, index int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if index < 0 || index >= len(w.snaps) {
		return false
	}
	for _, r := range w.snaps[index].Res[typeURL][name] {
		if r.Env == env && r.Hash == hash {
			return true
		}
	}
	return false
}

// noRollback checks (and otherwise fails the run) that it, received over
// cur, is not content the upstream published before cur's. Content the
// client brought from elsewhere (an older stream: another replica, before a
// restart) may be rolled back only by a relay whose upstream may have
// nothing newer yet (a replica behind its sibling, see window); content the
// relay sent on this stream, never. Guarded rollouts revert canaries to the
// last accepted version by design: they are not checked. Called with mu held.
func (c *Client) noRollback(t string, cur *held, it item) bool {
	if cur == nil || cur.hash == it.hash || cur.env != it.env || c.run.sched.Opts.Rollout {
		return true
	}
	if !c.run.world.Older(t, it.name, it.env, it.hash, cur.hash) {
		return true
	}
	if cur.gen != c.gen && c.relayMayHave(t, it) {
		return true
	}
	from := "this relay sent it"
	if cur.gen != c.gen {
		from = "it brought it"
	}
	c.fail("rolled back: sent %s %s (env %q) content %s, older than the %s it holds (%s)", t, it.name, it.env, it.hash, cur.hash, from)
	return false
}

// relayMayHave reports whether the relay the client talks to may have
// nothing newer from the upstream than it: its content was current at an
// index within the relay's window since the client's stream asked for the
// type (as in justified). Called with mu held.
func (c *Client) relayMayHave(t string, it item) bool {
	current := func(i int) bool { return c.run.world.CurrentAt(t, it.name, it.env, it.hash, i) }
	return within(c.run.windows(c.run.instance(c.target), t), c.types[t].since, it.name, current)
}

// within reports whether state holds at a snapshot index the relay may be
// at for name: in a window of its streams that carry name (window.carries),
// from the latest index the relay had acknowledged when the client's stream
// asked for the type (since: it may have acknowledged a newer state since
// it built the response) to the latest queued. Each stream (one per
// authority) applies or NACKs its own responses: one stream's
// acknowledgement says nothing of what another brought.
func within(windows, since map[string]window, name string, state func(int) bool) bool {
	for scope, w := range windows {
		if !w.carries(name) {
			continue
		}
		low := w.first
		if then, ok := since[scope]; ok {
			low = then.low
		}
		for i := low; i <= w.high; i++ {
			if state(i) {
				return true
			}
		}
	}
	return false
}
