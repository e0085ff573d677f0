package main

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/eventforge/eventforge/api"
	"github.com/eventforge/eventforge/cdc"
	"github.com/eventforge/eventforge/console"
	"github.com/eventforge/eventforge/consumer"
	"github.com/eventforge/eventforge/verify"
)

// parse parses args as the binary does, without running the command.
func parse(t *testing.T, args ...string) cli {
	t.Helper()
	var c cli
	p, err := kong.New(&c, parserOptions()...)
	if err != nil {
		t.Fatalf("building the parser: %v", err)
	}
	if _, err := p.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return c
}

// Every flag of a component defaults to what the component's DefaultConfig
// says, so that DefaultConfig is the one statement of the defaults: a
// program that starts from it runs what the binary runs without flags.
func TestFlagDefaultsAreDefaultConfig(t *testing.T) {
	clearEnv(t)
	c := parse(t, "api")
	for _, tt := range []struct {
		component string
		got, want any
	}{
		{"api", c.API.Config, api.DefaultConfig()},
		{"console", c.API.Console, console.DefaultConfig()},
		{"cdc", parse(t, "cdc").CDC.Config, cdc.DefaultConfig()},
		{"consumer", parse(t, "consumer").Consumer.Config, consumer.DefaultConfig()},
		{"verify", parse(t, "verify").Verify.Config, verify.DefaultConfig()},
	} {
		t.Run(tt.component, func(t *testing.T) {
			got, want := reflect.ValueOf(tt.got), reflect.ValueOf(tt.want)
			for i := range got.NumField() {
				name := got.Type().Field(i).Name
				if g, w := got.Field(i).Interface(), want.Field(i).Interface(); !reflect.DeepEqual(g, w) {
					t.Errorf("%s: the flag defaults to %#v, DefaultConfig() to %#v", name, g, w)
				}
			}
		})
	}
}

// clearEnv unsets every EVENTFORGE_* variable for the test, so that the
// flags fall back to their defaults.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "EVENTFORGE_") {
			t.Setenv(k, "") // restored after the test
			os.Unsetenv(k)
		}
	}
}
