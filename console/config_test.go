package console

import (
	"maps"
	"strings"
	"testing"

	"github.com/eventforge/eventforge/consumer/registry"
)

// By default the console shows every registered consumer with its default
// group, and the defaults are valid.
func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if !maps.Equal(c.Consumers, registry.DefaultGroups()) {
		t.Errorf("--console-consumer defaults to %v, want %v", c.Consumers, registry.DefaultGroups())
	}
	if err := c.Validate(); err != nil {
		t.Errorf("the defaults are invalid: %v", err)
	}
}

func TestCheckExposure(t *testing.T) {
	tests := []struct {
		name    string
		enabled bool
		token   string
		addr    string
		refused bool
	}{
		{"off on every interface", false, "", "0.0.0.0:8080", false},
		{"on loopback without a token", true, "", "127.0.0.1:8080", false},
		{"on another loopback address", true, "", "127.0.0.2:8080", false},
		{"on localhost", true, "", "localhost:8080", false},
		{"on IPv6 loopback", true, "", "[::1]:8080", false},
		{"on IPv4-mapped loopback", true, "", "[::ffff:127.0.0.1]:8080", false},
		{"on every interface without a token", true, "", "0.0.0.0:8080", true},
		{"on an empty host without a token", true, "", ":8080", true},
		{"on IPv6 any without a token", true, "", "[::]:8080", true},
		{"on a routable address without a token", true, "", "10.1.2.3:8080", true},
		{"on a host name without a token", true, "", "eventforge-api:8080", true},
		{"on every interface with a token", true, "s3cret", "0.0.0.0:8080", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Enabled, cfg.OpsToken = tt.enabled, tt.token
			err := cfg.CheckExposure(tt.addr)
			if (err != nil) != tt.refused {
				t.Fatalf("CheckExposure(%q) = %v, want refused %v", tt.addr, err, tt.refused)
			}
			if err != nil && (!strings.Contains(err.Error(), "--ops-token") || !strings.Contains(err.Error(), "--console")) {
				t.Fatalf("CheckExposure(%q) = %q: the message must name --console and --ops-token", tt.addr, err)
			}
		})
	}
}
