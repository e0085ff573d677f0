package main

import (
	"os"
	"reflect"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/eventforge/eventforge/api"
	"github.com/eventforge/eventforge/cdc"
	"github.com/eventforge/eventforge/console"
	"github.com/eventforge/eventforge/consumer"
	"github.com/eventforge/eventforge/contract"
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

// The flags that default to a name of the event contract (interpolated into
// the struct tags) default to what each component's DefaultConfig says.
// The console's --database-url defaults to the api's, so it is empty.
func TestContractFlagDefaults(t *testing.T) {
	for _, env := range []string{"DATABASE_URL", "KAFKA_BROKERS", "TOPIC", "TOPICS", "SLOT", "PUBLICATION", "CONSOLE_TOPIC", "CONSOLE_SLOT"} {
		t.Setenv("EVENTFORGE_"+env, "") // restored after the test
		os.Unsetenv("EVENTFORGE_" + env)
	}
	contractFields := []string{"DatabaseURL", "KafkaBrokers", "Topic", "Topics", "Slot", "Publication"}
	tests := []struct {
		args []string
		got  func(cli) any
		want any
	}{
		{[]string{"cdc"}, func(c cli) any { return c.CDC.Config }, cdc.DefaultConfig()},
		{[]string{"consumer"}, func(c cli) any { return c.Consumer.Config }, consumer.DefaultConfig()},
		{[]string{"verify"}, func(c cli) any { return c.Verify.Config }, verify.DefaultConfig()},
		{[]string{"api"}, func(c cli) any { return c.API.Config }, api.DefaultConfig()},
		{[]string{"api"}, func(c cli) any { return c.API.Console }, console.Config{KafkaBrokers: contract.KafkaBrokers, Topic: contract.Topic, Slot: contract.Slot}},
	}
	for _, tt := range tests {
		got := reflect.ValueOf(tt.got(parse(t, tt.args...)))
		want := reflect.ValueOf(tt.want)
		for _, name := range contractFields {
			g, w := got.FieldByName(name), want.FieldByName(name)
			if !g.IsValid() {
				continue
			}
			if !reflect.DeepEqual(g.Interface(), w.Interface()) {
				t.Errorf("eventforge %v: --%s defaults to %v, DefaultConfig() to %v", tt.args, name, g, w)
			}
		}
	}
}
