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

// The config example of docs/INTERFACE.md parses strictly: every key is a
// real field. (It names TLS and token files, so it is not validated.)
func TestInterfaceConfigExample(t *testing.T) {
	data, err := os.ReadFile("../docs/INTERFACE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "## Config file")
	if !ok {
		t.Fatal("INTERFACE.md has no ## Config file section")
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("INTERFACE.md's Config file section has no yaml block")
	}
	if _, err := config.Parse([]byte(block)); err != nil {
		t.Fatalf("INTERFACE.md config example: %v", err)
	}
}
