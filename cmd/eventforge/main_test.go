package main

import (
	"bytes"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/eventforge/eventforge/api"
	"github.com/eventforge/eventforge/cdc"
	"github.com/eventforge/eventforge/console"
	"github.com/eventforge/eventforge/consumer"
	"github.com/eventforge/eventforge/consumer/registry"
	"github.com/eventforge/eventforge/verify"
)

// parse parses args as the binary does, without running the command.
func parse(t *testing.T, args ...string) commandLine {
	t.Helper()
	var c commandLine
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
// says: a program that starts from it runs what the binary runs without
// flags. The flag tags are the one statement of the defaults; DefaultConfig
// reads them (config.Defaults), and this test holds the binary's parser
// (its variables, environment fallbacks and command structs) to the same
// result, and cdc's DefaultConfig, written out field by field, to its tags.
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
			compareFields(t, reflect.ValueOf(tt.got), reflect.ValueOf(tt.want))
		})
	}
}

// compareFields reports each field of got that differs from want, looking
// into embedded structs (flags of their own, e.g. engine.Settings).
func compareFields(t *testing.T, got, want reflect.Value) {
	t.Helper()
	for i := range got.NumField() {
		f := got.Type().Field(i)
		if _, embed := f.Tag.Lookup("embed"); (embed || f.Anonymous) && f.Type.Kind() == reflect.Struct {
			compareFields(t, got.Field(i), want.Field(i))
			continue
		}
		if g, w := got.Field(i).Interface(), want.Field(i).Interface(); !reflect.DeepEqual(g, w) {
			t.Errorf("%s: the flag defaults to %#v, DefaultConfig() to %#v", f.Name, g, w)
		}
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

// A flag that carries a secret is masked in the startup lines: its field has
// a log tag (logging.ConfigValue), and a secret given on the command line
// does not reach the line.
func TestStartupLinesMaskSecrets(t *testing.T) {
	clearEnv(t)
	var untagged []string
	walkFlags(reflect.TypeOf(commandLine{}), func(f reflect.StructField) {
		name, tag := f.Tag.Get("name"), f.Tag.Get("log")
		secret := strings.Contains(name, "password") || strings.Contains(name, "token") || strings.Contains(name, "secret")
		if (secret && tag != "secret") || (strings.HasSuffix(name, "url") && tag != "url") {
			untagged = append(untagged, "--"+name)
		}
	})
	if len(untagged) > 0 {
		t.Errorf("flags whose secrets would be logged: %v", untagged)
	}

	const secret = "s3cret-s3cret-s3cret-s3cret-s3cret"
	dsn := "postgres://eventforge:" + secret + "@127.0.0.1:5432/eventforge"
	sasl := []string{"--kafka-security-protocol", "sasl_plaintext", "--kafka-sasl-username", "u", "--kafka-sasl-password", secret}
	api := parse(t, append([]string{"api", "--database-url", dsn, "--page-token-key", secret, "--console", "--ops-token", secret}, sasl...)...)
	lines := map[string][]any{
		"api":      {slog.Any("", api.API.Config), slog.Any("", api.API.Console), "kafka_security", api.API.Kafka},
		"cdc":      {slog.Any("", parse(t, "cdc", "--database-url", dsn).CDC.Config)},
		"consumer": {slog.Any("", parse(t, "consumer", "--database-url", dsn).Consumer.Config)},
		"verify":   {slog.Any("", parse(t, "verify", "--database-url", dsn).Verify.Config)},
	}
	for component, args := range lines {
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("starting "+component, args...)
		if strings.Contains(buf.String(), secret) {
			t.Errorf("%s: a secret reached the startup line: %s", component, buf.String())
		}
		if !strings.Contains(buf.String(), `"database_url":"postgres://eventforge:xxxxx@127.0.0.1:5432/eventforge"`) {
			t.Errorf("%s: the startup line has no masked database_url: %s", component, buf.String())
		}
	}
}

// walkFlags calls fn for every field of t and its nested structs that names
// a flag.
func walkFlags(t reflect.Type, fn func(reflect.StructField)) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Tag.Get("name") != "" && f.Type.Kind() != reflect.Struct {
			fn(f)
		}
		if f.Type.Kind() == reflect.Struct {
			walkFlags(f.Type, fn)
		}
	}
}

// The help texts that list the consumers take them from the registry: each
// names every registered consumer.
func TestHelpNamesEveryConsumer(t *testing.T) {
	for _, command := range [][]string{{"consumer"}, {"dlq", "list"}, {"dlq", "replay"}} {
		var out bytes.Buffer
		var c commandLine
		p, err := kong.New(&c, append(parserOptions(), kong.Writers(&out, &out), kong.Exit(func(int) {}))...)
		if err != nil {
			t.Fatalf("building the parser: %v", err)
		}
		_, _ = p.Parse(append(command, "--help"))
		for _, name := range registry.Names() {
			if !strings.Contains(out.String(), name) {
				t.Errorf("eventforge %s --help does not name consumer %q:\n%s", strings.Join(command, " "), name, out.String())
			}
		}
	}
}
