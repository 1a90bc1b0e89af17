package authz

import (
	"errors"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/keying"
)

// Principal is who a stream's client is, for authorization.
type Principal struct {
	NodeID, Cluster string
	// MTLS reports a verified client certificate; SPIFFEID and URISANs come
	// from it.
	MTLS     bool
	SPIFFEID string
	URISANs  []string
}

// Authorizer decides whether p may subscribe to name (keying.Wildcard for
// the wildcard) of typeURL: nil, or the reason for a denial.
type Authorizer func(p *Principal, typeURL, name string) error

// New turns the authorization config into the servers' check. Without a
// config every client may subscribe to everything but secrets, which need
// mTLS.
func New(a *config.Authorization) Authorizer {
	if a == nil {
		a = &config.Authorization{}
	}
	return func(p *Principal, typeURL, name string) error {
		// gateway.control.v1 SecretMaterial carries private keys: a secret.
		if (typeURL == keying.SecretType || typeURL == controlv1.SecretMaterialType) && !p.MTLS && !a.AllowSecretsWithoutMTLS {
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

func ruleAllows(r *config.AuthzRule, p *Principal, typeURL, name string) bool {
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
				if Match(g, s) {
					return true
				}
			}
		}
	}
	return false
}
