package authz

import "strings"

// Match matches s against pattern, where '*' matches any run of characters
// ('/' included) and everything else matches itself; the whole of s must
// match. It runs in one pass over s, whatever the number of '*': s may come
// from a client (node id, resource name).
func Match(pattern, s string) bool {
	star := strings.IndexByte(pattern, '*')
	if star < 0 {
		return pattern == s
	}
	if !strings.HasPrefix(s, pattern[:star]) {
		return false
	}
	s, pattern = s[star:], pattern[star+1:]
	if pattern == "" {
		return true
	}
	last := strings.LastIndexByte(pattern, '*')
	if last < 0 {
		return strings.HasSuffix(s, pattern)
	}
	// The text after the last '*' ends s; what the stars between take is free,
	// so each middle segment matches at its leftmost place in what is left.
	if !strings.HasSuffix(s, pattern[last+1:]) {
		return false
	}
	s = s[:len(s)-len(pattern[last+1:])]
	for mid := pattern[:last]; ; {
		seg, rest, more := strings.Cut(mid, "*")
		i := strings.Index(s, seg)
		if i < 0 {
			return false
		}
		if !more {
			return true
		}
		s, mid = s[i+len(seg):], rest
	}
}
