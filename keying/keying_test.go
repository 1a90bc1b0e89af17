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

func TestSubscriptionKeys(t *testing.T) {
	const params = "env=prod&zone=a"
	for _, tc := range []struct {
		name, params string
		want         string
	}{
		{"listener-1", "", "listener-1"},
		{"listener-1", params, "listener-1\x00" + params},
		{"xdstp://a/T/foo", params, "xdstp://a/T/foo\x00" + params},
		{"xdstp://a/T/foo/*", params, "xdstp://a/T/foo/*"},
		{"xdstp://a/T/*?k=v", params, "xdstp://a/T/*?k=v"},
		{keying.Wildcard, params, keying.Wildcard},
		{"", params, ""},
	} {
		key := keying.NodeSubscriptionKey(tc.name, tc.params)
		if key != tc.want {
			t.Errorf("NodeSubscriptionKey(%q, %q) = %q, want %q", tc.name, tc.params, key, tc.want)
		}
		if keying.HasParams(key) != (key != tc.name) {
			t.Errorf("HasParams(%q) = %v", key, keying.HasParams(key))
		}
		name, ps := keying.SplitSubscriptionKey(key)
		if name != tc.name || (ps != "") != keying.HasParams(key) {
			t.Errorf("SplitSubscriptionKey(%q) = %q, %q", key, name, ps)
		}
	}
}
