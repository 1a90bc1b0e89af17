package relay

import (
	"errors"
	"strings"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/gateway"
	"github.com/xds-relay/xds-relay/keying"
)

// authorizer turns the authorization config into the downstream server's
// check. Without a config every client may subscribe to everything but
// secrets, which need mTLS.
func authorizer(a *config.Authorization) downstream.Authorizer {
	if a == nil {
		a = &config.Authorization{}
	}
	return func(p *downstream.Principal, typeURL, name string) error {
		// gateway.control.v1 SecretMaterial carries private keys: a secret.
		if (typeURL == keying.SecretType || typeURL == gateway.SecretMaterialType) && !p.MTLS && !a.AllowSecretsWithoutMTLS {
			return errors.New("xds-relay: secrets are served over mTLS only")
		}
		if len(a.Rules) == 0 {
			return nil
		}
		for i := range a.Rules {
			if ruleAllows(&a.Rules[i], p, typeURL, name) {
				return nil
			}
		}
		return errors.New("xds-relay: no authorization rule allows this subscription")
	}
}

func ruleAllows(r *config.AuthzRule, p *downstream.Principal, typeURL, name string) bool {
	if len(r.Identities) > 0 {
		if !p.MTLS {
			return false
		}
		ids := append([]string{p.SPIFFEID}, p.URISANs...)
		if !anyGlob(r.Identities, ids...) {
			return false
		}
	}
	auth, _ := keying.Authority(name)
	return matchList(r.Nodes, p.NodeID) && matchList(r.Clusters, p.Cluster) &&
		(matchList(r.Types, typeURL) || matchList(r.Types, keying.ShortType(typeURL))) &&
		matchList(r.Authorities, auth) && matchList(r.Names, name)
}

// matchList reports whether s matches one of the globs; an empty list
// matches anything.
func matchList(globs []string, s string) bool {
	return len(globs) == 0 || anyGlob(globs, s)
}

func anyGlob(globs []string, ss ...string) bool {
	for _, g := range globs {
		for _, s := range ss {
			if s != "" || g == "" {
				if glob(g, s) {
					return true
				}
			}
		}
	}
	return false
}

// glob matches s against pattern, where '*' matches any run of characters
// ('/' included) and everything else matches itself.
func glob(pattern, s string) bool {
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
			if glob(pattern, s[i:]) {
				return true
			}
		}
		return false
	}
}
