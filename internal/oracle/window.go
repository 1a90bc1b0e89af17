package oracle

// sentLocked records that relay scope node was sent the state of typeURL
// at snapshot index. Called with u.mu held.
func (u *Upstream) sentLocked(node, typeURL string, index int) {
	if u.sent[node] == nil {
		u.sent[node] = map[string]*window{}
	}
	if w := u.sent[node][typeURL]; w == nil {
		u.sent[node][typeURL] = &window{first: index, low: index, high: index}
	} else {
		w.high = max(w.high, index)
	}
}

// ackedIndexLocked records that relay scope node applied the state of
// typeURL at snapshot index. Called with u.mu held.
func (u *Upstream) ackedIndexLocked(node, typeURL string, index int) {
	if w := u.sent[node][typeURL]; w != nil {
		w.low = max(w.low, index)
	}
}
