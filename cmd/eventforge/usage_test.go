package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// mainArgsEnv makes the test binary run the binary's main with the
// arguments it holds (a JSON array) instead of the tests: runMain runs the
// command line as a process of its own, so that its exit status and output
// are the binary's.
const mainArgsEnv = "EVENTFORGE_CMD_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(mainArgsEnv); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			panic(err)
		}
		os.Args = append([]string{"eventforge"}, a...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ran is what a command line printed and its exit status.
type ran struct {
	code           int
	stdout, stderr string
}

// runMain runs `eventforge args...` (the binary's main in a process of its
// own) without the EVENTFORGE_* variables of the test's environment.
func runMain(t *testing.T, args ...string) ran {
	t.Helper()
	encoded, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EVENTFORGE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, mainArgsEnv+"="+string(encoded))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	r := ran{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running eventforge %q: %v", args, err)
	}
	return r
}

// A command line that does not parse exits 2 with one line on stderr that
// names the problem and points to the help of the command it selected;
// nothing runs and no help is printed.
func TestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		name    string
		args    []string
		problem string // in the line
		help    string // the command whose --help the line names
	}{
		{"no command", nil, `expected one of "api", "cdc"`, "eventforge"},
		{"no subcommand", []string{"dlq"}, `expected one of "list", "show", "replay", "purge"`, "eventforge dlq"},
		{"unknown command", []string{"serve"}, `unexpected argument serve`, "eventforge"},
		{"unknown flag", []string{"cdc", "--no-such-flag"}, "unknown flag --no-such-flag", "eventforge cdc"},
		{"malformed value", []string{"dlq", "list", "--older-than", "soon"}, `--older-than: expected duration but got "soon"`, "eventforge dlq list"},
		{"unknown consumer to verify", []string{"verify", "--consumer", "foo=bar"}, `no effect check for consumer "foo"`, "eventforge verify"},
		{"error class not in the set", []string{"dlq", "list", "--class", "bogus"}, `--class must be one of`, "eventforge dlq list"},
		{"consumer not in the set", []string{"dlq", "replay", "--all", "--consumer", "nobody"}, `--consumer must be one of`, "eventforge dlq replay"},
		{"consumer name not in the set", []string{"consumer", "--name", "nobody"}, `--name must be one of`, "eventforge consumer"},
		{"PostgreSQL version not in the set", []string{"stack", "up", "--pg-version", "14"}, `--pg-version must be one of "15","16","17","18"`, "eventforge stack up"},
		{"log level not in the set", []string{"slot", "status", "--log-level", "loud"}, `--log-level must be one of`, "eventforge slot status"},
		{"replay without a selection", []string{"dlq", "replay"}, "say what to replay", "eventforge dlq replay"},
		{"replay of a malformed position", []string{"dlq", "replay", "three"}, `position "three": want <partition>:<offset>`, "eventforge dlq replay"},
		{"purge of two selections", []string{"dlq", "purge", "--all", "--older-than", "1h"}, "say what to purge", "eventforge dlq purge"},
		{"show without a record", []string{"dlq", "show"}, "give a position <partition>:<offset> or --event-id", "eventforge dlq show"},
		{"outbox replay without a selection", []string{"outbox", "replay"}, "give event IDs, or both --since and --until", "eventforge outbox replay"},
		{"dev with half an external stack", []string{"dev", "--database-url", "postgres://127.0.0.1/x"}, "--database-url and --kafka-brokers go together", "eventforge dev"},
		{"Kafka flags that do not go together", []string{"dlq", "list", "--kafka-security-protocol", "sasl_ssl"},
			"kafka-security-protocol sasl_ssl needs kafka-sasl-username and kafka-sasl-password", "eventforge dlq list"},
		{"Kafka flags on a command without Kafka", []string{"stack", "status", "--kafka-security-protocol", "ssl"}, "unknown flag --kafka-security-protocol", "eventforge stack status"},
		{"tracing flags out of range", []string{"cdc", "--trace-sample-ratio", "2"}, "trace-sample-ratio 2: must be between 0 and 1", "eventforge cdc"},
		{"tracing flags on a command without spans", []string{"verify", "--otlp-endpoint", "http://127.0.0.1:4317"}, "unknown flag --otlp-endpoint", "eventforge verify"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runMain(t, tt.args...)
			if r.code != 2 {
				t.Errorf("exit status %d, want 2", r.code)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			line, rest, _ := strings.Cut(r.stderr, "\n")
			if rest != "" {
				t.Errorf("stderr has more than one line:\n%s", r.stderr)
			}
			if !strings.HasPrefix(line, "eventforge: ") || !strings.Contains(line, tt.problem) {
				t.Errorf("stderr %q does not name the problem %q", line, tt.problem)
			}
			if want := "; see '" + tt.help + " --help'"; !strings.HasSuffix(line, want) {
				t.Errorf("stderr %q does not end with %q", line, want)
			}
		})
	}
}

// --version prints one line with the version and the commit, and exits 0,
// wherever it stands on the command line.
func TestVersion(t *testing.T) {
	want := regexp.MustCompile(`^eventforge \S+ \(commit [0-9a-f]{40}(, modified)?\)\n$|^eventforge \S+ \(commit unknown\)\n$`)
	for _, args := range [][]string{{"--version"}, {"stack", "--version"}} {
		r := runMain(t, args...)
		if r.code != 0 || r.stderr != "" || !want.MatchString(r.stdout) {
			t.Errorf("eventforge %s: exit status %d, stdout %q, stderr %q; want 0 and one line matching %s",
				strings.Join(args, " "), r.code, r.stdout, r.stderr, want)
		}
	}
}

// --help prints the help of the command and exits 0. A command that talks
// to no Kafka shows no Kafka TLS and SASL flags, and one that creates no
// spans no tracing flags; the components show both.
func TestHelpShowsTheFlagsThatApply(t *testing.T) {
	for _, tt := range []struct {
		command        []string
		kafka, tracing bool
	}{
		{[]string{"stack"}, false, false},
		{[]string{"stack", "up"}, false, false},
		{[]string{"migrate"}, false, false},
		{[]string{"slot", "status"}, false, false},
		{[]string{"probe"}, false, false},
		{[]string{"cdc"}, true, true},
		{[]string{"consumer"}, true, true},
		{[]string{"dlq", "replay"}, true, false},
	} {
		t.Run(strings.Join(tt.command, " "), func(t *testing.T) {
			r := runMain(t, append(tt.command, "--help")...)
			if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "Usage: eventforge "+strings.Join(tt.command, " ")) {
				t.Fatalf("exit status %d, stderr %q, stdout:\n%s", r.code, r.stderr, r.stdout)
			}
			if got := strings.Contains(r.stdout, "--kafka-security-protocol"); got != tt.kafka {
				t.Errorf("shows the Kafka TLS and SASL flags: %v, want %v:\n%s", got, tt.kafka, r.stdout)
			}
			if got := strings.Contains(r.stdout, "--otlp-endpoint"); got != tt.tracing {
				t.Errorf("shows the tracing flags: %v, want %v:\n%s", got, tt.tracing, r.stdout)
			}
		})
	}
}

// Every command that takes --kafka-brokers takes the Kafka TLS and SASL
// flags, and no other command does.
func TestKafkaSecurityFlagsWhereKafkaIs(t *testing.T) {
	var c commandLine
	p, err := kong.New(&c, parserOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, leaf := range p.Model.Leaves(true) {
		var names []string
		for _, group := range leaf.AllFlags(true) {
			for _, f := range group {
				names = append(names, f.Name)
			}
		}
		brokers, security := slices.Contains(names, "kafka-brokers"), slices.Contains(names, "kafka-security-protocol")
		if brokers != security {
			t.Errorf("%s: --kafka-brokers %v, --kafka-security-protocol %v", leaf.FullPath(), brokers, security)
		}
	}
}

// dev's children run with the Kafka security and tracing settings dev was
// given: each set flag becomes the variable the child's flag reads.
func TestDevChildrenGetItsSettings(t *testing.T) {
	clearEnv(t)
	c := parse(t, "dev", "--kafka-security-protocol", "sasl_ssl", "--kafka-sasl-username", "u", "--kafka-sasl-password", "p",
		"--otlp-endpoint", "http://127.0.0.1:4317", "--trace-sample-ratio", "0.25")
	got := append(flagEnv(c.Dev.Kafka), flagEnv(c.Dev.Tracing)...)
	want := []string{"EVENTFORGE_KAFKA_SECURITY_PROTOCOL=sasl_ssl", "EVENTFORGE_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
		"EVENTFORGE_KAFKA_SASL_USERNAME=u", "EVENTFORGE_KAFKA_SASL_PASSWORD=p",
		"EVENTFORGE_OTLP_ENDPOINT=http://127.0.0.1:4317", "EVENTFORGE_TRACE_SAMPLE_RATIO=0.25"}
	if !slices.Equal(got, want) {
		t.Errorf("dev's children get\n%q\nwant\n%q", got, want)
	}
	child := runMain(t, "consumer", "--help")
	for _, kv := range want {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.Contains(child.stdout, "$"+name) {
			t.Errorf("eventforge consumer --help does not read %s", name)
		}
	}
}
