package consumer

import (
	"reflect"
	"testing"
	"time"

	"github.com/eventforge/eventforge/consumer/engine"
	"github.com/eventforge/eventforge/internal/testkit"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"defaults", func(*Config) {}, ""},
		{"ledger", func(c *Config) { c.Name = "ledger" }, ""},
		{"unknown name", func(c *Config) { c.Name = "billing" }, "unknown consumer"},
		{"no topics", func(c *Config) { c.Topics = nil }, "topic"},
		{"zero batch", func(c *Config) { c.BatchSize = 0 }, "batch-size"},
		{"zero attempts", func(c *Config) { c.MaxAttempts = 0 }, "max-attempts"},
		{"backoff order", func(c *Config) { c.InitialBackoff = time.Minute }, "initial-backoff"},
		{"pool smaller than workers", func(c *Config) { c.Workers, c.MaxConns = 8, 4 }, "max-conns"},
		{"empty dlq suffix", func(c *Config) { c.DLQSuffix = "" }, "dlq-suffix"},
		{"zero probe timeout", func(c *Config) { c.ProbeTimeout = 0 }, "probe-timeout"},
		{"batch wait", func(c *Config) { c.BatchWait = 10 * time.Millisecond }, ""},
		{"negative batch wait", func(c *Config) { c.BatchWait = -time.Millisecond }, "batch-wait"},
		{"batch wait too long", func(c *Config) { c.BatchWait = time.Minute }, "batch-wait"},
		{"no fetch wait", func(c *Config) { c.FetchWait = 0 }, ""},
		{"negative fetch wait", func(c *Config) { c.FetchWait = -time.Millisecond }, "fetch-wait"},
		{"fetch wait under a millisecond", func(c *Config) { c.FetchWait = 500 * time.Microsecond }, "fetch-wait"},
		{"fetch wait too long", func(c *Config) { c.FetchWait = time.Minute }, "fetch-wait"},
		{"longest attempt timeout", func(c *Config) { c.AttemptTimeout = engine.MaxAttemptTimeout }, ""},
		{"attempt timeout past the poll interval", func(c *Config) { c.AttemptTimeout = 10 * time.Minute }, "attempt-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			if err := c.Validate(); !testkit.ErrorContains(err, tt.wantErr) {
				t.Fatalf("error %v, want one mentioning %q (none if empty)", err, tt.wantErr)
			}
		})
	}
}

func TestGroupID(t *testing.T) {
	c := DefaultConfig()
	c.Name = "ledger"
	if got := c.GroupID(); got != "eventforge-ledger" {
		t.Fatalf("GroupID = %q", got)
	}
	c.Group = "custom"
	if got := c.GroupID(); got != "custom" {
		t.Fatalf("GroupID = %q", got)
	}
}

// The flags of `eventforge consumer` (their tags, read by DefaultConfig)
// default to what the engine runs with unless configured otherwise
// (engine.DefaultSettings), which its zero settings fall back to.
func TestDefaultConfigIsTheEngineDefaults(t *testing.T) {
	if got, want := DefaultConfig().Settings, engine.DefaultSettings(); !reflect.DeepEqual(got, want) {
		t.Errorf("the flags give the engine\n%+v\nDefaultSettings are\n%+v", got, want)
	}
}
