package authz

import "strings"

// Match matches s against pattern, where '*' matches any run of characters
// ('/' included) and everything else matches itself.
func Match(pattern, s string) bool {
	for {
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
		// Try every position for the rest of the pattern.
		for i := 0; i <= len(s); i++ {
			if Match(pattern, s[i:]) {
				return true
			}
		}
		return false
	}
}
