package keying_test

import (
	"testing"

	"github.com/xds-relay/xds-relay/keying"
)

func TestShortType(t *testing.T) {
	for in, want := range map[string]string{
		keying.ClusterType:                   "Cluster",
		keying.ExtensionConfigType:           "TypedExtensionConfig",
		"type.googleapis.com/Foo":            "Foo",
		"example.com/pkg.v1.Bar":             "Bar",
		"gateway.control.v1.SecretMaterial":  "SecretMaterial",
		"Cluster":                            "Cluster",
		"type.googleapis.com/envoy.Cluster/": "",
		"":                                   "",
	} {
		if got := keying.ShortType(in); got != want {
			t.Errorf("ShortType(%q) = %q, want %q", in, got, want)
		}
	}
}
