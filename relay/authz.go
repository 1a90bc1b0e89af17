package relay

import (
	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/config"
)

// authorizer is authz.New, under the name dialects.go calls.
func authorizer(a *config.Authorization) authz.Authorizer { return authz.New(a) }

// glob is authz.Match, under the name debug.go's node filter calls.
func glob(pattern, s string) bool { return authz.Match(pattern, s) }
