package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/eventforge/eventforge/contract"
)

// sample has a flag of every kind EventForge's configurations use.
type sample struct {
	URL      string            `name:"database-url" default:"${database_url}"`
	Brokers  string            `name:"kafka-brokers" default:"${kafka_brokers}"`
	Routes   map[string]string `name:"topic" default:"${aggregate_order}=${topic}"`
	Topics   []string          `name:"topics" default:"${topic},other"`
	Name     string            `name:"name" default:"${pick}" enum:"${choices}" help:"One of ${choices}."`
	Wait     time.Duration     `name:"wait" default:"1m30s"`
	Conns    int32             `name:"max-conns" default:"16"`
	Bytes    int64             `name:"max-bytes" default:"16777216"`
	Slots    []string          `name:"standby-slots" sep:","`
	On       bool              `name:"on"`
	Required string            `name:"required" required:""`
	Set      string            `kong:"-"`
}

var sampleVars = map[string]string{"pick": "b", "choices": "a,b"}

func TestDefaultsAreTheTags(t *testing.T) {
	want := sample{
		URL: contract.DatabaseURL, Brokers: contract.KafkaBrokers,
		Routes: map[string]string{contract.AggregateOrder: contract.Topic}, Topics: []string{contract.Topic, "other"},
		Name: "b", Wait: 90 * time.Second, Conns: 16, Bytes: 16 << 20,
	}
	if got := Defaults[sample](sampleVars); !reflect.DeepEqual(got, want) {
		t.Errorf("Defaults:\n got %+v\nwant %+v", got, want)
	}
}

// Defaults gives what kong gives for a command line without flags, with
// the same variables, whatever the environment says.
func TestDefaultsAreWhatAnEmptyCommandLineParses(t *testing.T) {
	t.Setenv("EVENTFORGE_MAX_CONNS", "3")
	t.Setenv("EVENTFORGE_WAIT", "1s")
	var parsed sample
	p, err := kong.New(&parsed, Vars(sampleVars), kong.DefaultEnvars("EVENTFORGE"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse([]string{"--required", "x"}); err != nil {
		t.Fatal(err)
	}
	parsed.Required = ""
	got := Defaults[sample](sampleVars)
	if parsed.Conns != 3 || parsed.Wait != time.Second {
		t.Fatalf("the parser read no environment: %+v", parsed)
	}
	parsed.Conns, parsed.Wait = got.Conns, got.Wait // the environment's, not the tags'
	if !reflect.DeepEqual(got, parsed) {
		t.Errorf("Defaults %+v, the parser %+v", got, parsed)
	}
	if got.Conns != 16 || got.Wait != 90*time.Second {
		t.Errorf("Defaults read the environment: %+v", got)
	}
}

func TestDefaultsRefuseTagsThatDoNotParse(t *testing.T) {
	type undefinedVar struct {
		X string `name:"x" default:"${nope}"`
	}
	type badDuration struct {
		X time.Duration `name:"x" default:"soon"`
	}
	for name, fn := range map[string]func(){
		"an undefined variable":  func() { Defaults[undefinedVar]() },
		"a default not parsed":   func() { Defaults[badDuration]() },
		"a variable not given":   func() { Defaults[sample]() },
		"a default not a choice": func() { Defaults[sample](map[string]string{"pick": "c", "choices": "a,b"}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "config.Defaults") {
					t.Errorf("Defaults did not panic (%v)", r)
				}
			}()
			fn()
		})
	}
}

func TestVarsAddToTheContracts(t *testing.T) {
	v := Vars(map[string]string{"a": "1"}, map[string]string{"a": "2", "topic": "t"})
	if v["a"] != "2" || v["topic"] != "t" || v["slot"] != contract.Slot {
		t.Errorf("Vars = %v", v)
	}
	if Vars()["topic"] != contract.Topic {
		t.Error("Vars changed the contract's variables")
	}
}
