package main

import (
	"os"
	"strings"
	"testing"

	"github.com/eventforge/eventforge/bench/polling"
)

// The polling relay's flags default to polling.DefaultConfig, the settings
// docs/bench.md explains: the relay's parser has the variables
// config.Defaults reads the tags with.
func TestRelayFlagDefaultsAreDefaultConfig(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "EVENTFORGE_") {
			t.Setenv(k, "") // restored after the test
			os.Unsetenv(k)
		}
	}
	c, err := parseRelay([]string{"--database-url", "postgres://x/db", "--topic", "t"})
	if err != nil {
		t.Fatal(err)
	}
	want := polling.DefaultConfig()
	want.DatabaseURL, want.Topic = "postgres://x/db", "t"
	if c.Config != want {
		t.Errorf("flags give %+v, DefaultConfig %+v", c.Config, want)
	}
	if _, err := parseRelay([]string{}); err == nil {
		t.Error("the relay parsed without --database-url and --topic")
	}
}
