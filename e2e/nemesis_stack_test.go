package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/testkit"
)

// standbyMode is how a schedule's PostgreSQL is replicated.
type standbyMode string

const (
	noStandby    standbyMode = "none"
	syncStandby  standbyMode = "synchronous"
	asyncStandby standbyMode = "asynchronous"
)

// nemesisPGVersion is the PostgreSQL major version the nemesis runs:
// $EVENTFORGE_PG_VERSION, default 15.
func nemesisPGVersion() int {
	if v, err := strconv.Atoi(os.Getenv("EVENTFORGE_PG_VERSION")); err == nil && v > 0 {
		return v
	}
	return localstack.DefaultPGVersion
}

// nemesisStack is one schedule's private stack and the processes on it.
type nemesisStack struct {
	t       *testing.T
	version int
	pg      *testenv.Private
	kafka   *localstack.KafkaCluster
	standby *testenv.Standby
	mode    standbyMode
	// adminDSN reaches the current primary as the superuser, through the
	// standby too once there is one.
	adminDSN string
	pl       *pipeline
	ledger   string // the ledger consumer's group
	// net holds the readers' network namespaces: each reader runs in one of
	// its own, so that its link can be cut while the other takes over.
	net         *testenv.Network
	readerHosts map[string]*testenv.NetHost
	// readerMetrics are the two readers' metrics addresses.
	readerMetrics map[string]string
	comps         []*component
	byName        map[string]*component
}

// nemesisPGSettings are the schedule's server settings beyond the stack's:
// two-phase commit for the writers that use it.
var nemesisPGSettings = []string{"max_prepared_transactions = 20"}

// newNemesisStack starts a schedule's stack: PostgreSQL (with a standby of
// the given mode), a one-node Kafka cluster of its own (its broker is
// paused, killed and restarted), the pipeline's database, slot and topic.
// The processes are started by startProcesses.
func newNemesisStack(t *testing.T, mode standbyMode) *nemesisStack {
	t.Helper()
	version := nemesisPGVersion()
	s := &nemesisStack{t: t, version: version, mode: mode, readerMetrics: map[string]string{}, byName: map[string]*component{},
		readerHosts: map[string]*testenv.NetHost{}}
	s.net = testenv.NewNetwork(t)
	for _, r := range []string{"cdc-a", "cdc-b"} {
		s.readerHosts[r] = s.net.AddHost(t)
	}
	s.pg = testenv.NewPrivate(t, testenv.WithPGVersion(version), testenv.WithoutKafka(), testenv.WithPGSettings(nemesisPGSettings...),
		testenv.WithClientNetwork(s.net))
	s.kafka = startNemesisKafka(t, s.net.HostAddr)
	env := s.pg.Env(t)
	env.Endpoints.KafkaBootstrap = s.kafka.Bootstrap
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := localstack.EnsureTopics(ctx, s.kafka.Bootstrap, []localstack.TopicSpec{{Name: env.Topic, Partitions: 6}}); err != nil {
		t.Fatalf("creating topic %s: %v", env.Topic, err)
	}
	s.adminDSN = s.pg.Endpoints.AdminDSN
	if mode != noStandby {
		var opts []testenv.StandbyOption
		if mode == syncStandby {
			opts = append(opts, testenv.Synchronous())
		}
		if version >= 17 {
			opts = append(opts, testenv.FailoverSlotSync())
		}
		s.standby = s.pg.AddStandby(t, opts...)
		env.UseDatabaseURL(t, s.standby.MultiHostDSN(t, env.DatabaseURL))
		s.adminDSN = s.standby.MultiHostDSN(t, s.pg.Endpoints.AdminDSN)
	}
	s.pl = newPipelineOn(t, env)
	s.ledger = ledgerGroup(t, s.pl)
	return s
}

// readerFlags are the flags of both readers: quick checkpoints and
// takeovers, so that a schedule sees many of them; on 15 and 16 with a
// standby, the wait for its flush (17 has synchronized_standby_slots).
func (s *nemesisStack) readerFlags() []string {
	flags := []string{"--checkpoint-interval", "2s", "--unhealthy-after", "20s", "--flush-timeout", "5s", "--max-backoff", "2s", "--log-level", "info"}
	if s.standby != nil && s.version < 17 {
		flags = append(flags, "--synchronized-standby-slots", s.standby.Name)
	}
	return flags
}

// startProcesses starts the api, two readers of the slot and both
// consumers, each a component the faults kill, stop and restart.
func (s *nemesisStack) startProcesses() {
	t, pl := s.t, s.pl
	add := func(name string, start func(gen int) *proc) {
		c := &component{name: name, start: start}
		s.comps = append(s.comps, c)
		s.byName[name] = c
	}
	add("api", func(g int) *proc { return pl.apiProc(t, fmt.Sprintf("api-%d", g), nil, pl.env.DatabaseURL) })
	for _, r := range []string{"cdc-a", "cdc-b"} {
		host := s.readerHosts[r]
		addr := host.Addr + ":9464" // the namespace's own port space
		s.readerMetrics[r] = addr
		add(r, func(g int) *proc {
			args := append([]string{"cdc",
				"--database-url", viaBridge(pl.env.DatabaseURL, s.net.HostAddr), "--kafka-brokers", s.kafka.ExternalBootstrap,
				"--slot", pl.env.Slot, "--topic", "order=" + pl.env.Topic, "--status-interval", "500ms",
				"--metrics-addr", addr}, s.readerFlags()...)
			return startIn(t, host, fmt.Sprintf("%s-%d", r, g), nil, args...)
		})
	}
	add("fulfillment", func(g int) *proc {
		p, _ := consumerProc(t, pl, fmt.Sprintf("fulfillment-%d", g), "fulfillment", pl.env.Group, nil)
		return p
	})
	add("ledger", func(g int) *proc {
		p, _ := consumerProc(t, pl, fmt.Sprintf("ledger-%d", g), "ledger", s.ledger, nil)
		return p
	})
	for _, c := range s.comps {
		c.restart()
	}
	pl.waitAPIReady(t, s.byName["api"].current())
}

// viaBridge points a loopback DSN at the bridge's address, for a process in
// a namespace.
func viaBridge(dsn, addr string) string { return strings.ReplaceAll(dsn, "127.0.0.1", addr) }

// startNemesisKafka starts a one-node cluster of the schedule's own that
// also listens on the bridge's address, for the readers in namespaces.
func startNemesisKafka(t *testing.T, host string) *localstack.KafkaCluster {
	t.Helper()
	dir := testkit.StackDir(t, "eventforge-kafka-")
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := localstack.StartKafkaCluster(ctx, localstack.ClusterConfig{StateDir: dir, Nodes: 1, ExternalHost: host}, quietLogger())
	if err != nil {
		t.Fatalf("starting the schedule's kafka: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// current returns the component's running process.
func (c *component) current() *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// signal sends sig to the component's process group.
func (c *component) signal(sig syscall.Signal) error {
	p := c.current()
	if err := syscall.Kill(-p.Cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("%s: %s: %w", c.name, sig, err)
	}
	return nil
}

// running reports whether the component's process has not exited.
func (c *component) running() bool {
	select {
	case <-c.current().Exited():
		return false
	default:
		return true
	}
}

// heal brings every component back: resumed if stopped, restarted if it
// exited.
func (s *nemesisStack) healProcesses() {
	for _, c := range s.comps {
		if c.running() {
			_ = c.signal(syscall.SIGCONT)
			continue
		}
		s.t.Logf("%s had exited (%v); restarting it", c.name, c.current().Err())
		c.restart()
	}
	s.pl.waitAPIReady(s.t, s.byName["api"].current())
}
