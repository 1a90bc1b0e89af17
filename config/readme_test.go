package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/xds-relay/xds-relay/config"
)

// The README's configuration reference is checked against the schema: it
// must parse strictly (every key a real field) and validate.
func TestREADMEConfigReference(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "## Configuration")
	if !ok {
		t.Fatal("README has no ## Configuration section")
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README's Configuration section has no yaml block")
	}
	cfg, err := config.Parse([]byte(block))
	if err != nil {
		t.Fatalf("README config reference: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("README config reference: %v", err)
	}
}
