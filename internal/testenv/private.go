package testenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testkit"
	"github.com/eventforge/eventforge/schema"
)

// Private is a PostgreSQL + Kafka stack that belongs to one test: its own
// state dir under /var/tmp and its own free ports. Tests that stop, kill or
// restart a service use it; the shared stack is never touched. It is stopped
// and removed when the test ends (its state dir is kept when the test
// failed). PostgreSQL runs the version of $EVENTFORGE_PG_VERSION (default
// 15) unless WithPGVersion says otherwise.
type Private struct {
	Config    localstack.Config
	Endpoints localstack.Endpoints
	logger    *slog.Logger
}

// PrivateOption configures NewPrivate.
type PrivateOption func(*localstack.Config)

// WithPGVersion runs PostgreSQL major version major (15–18) instead of the
// one $EVENTFORGE_PG_VERSION names.
func WithPGVersion(major int) PrivateOption {
	return func(c *localstack.Config) { c.PGVersion = major }
}

// WithPGSettings appends postgresql.conf lines to the stack's settings.
func WithPGSettings(lines ...string) PrivateOption {
	return func(c *localstack.Config) { c.PGSettings = append(c.PGSettings, lines...) }
}

// WithClientNetwork lets processes on network n (namespaces of a test)
// connect: the server also listens on n's bridge address, and pg_hba.conf
// admits n's subnet.
func WithClientNetwork(n *Network) PrivateOption {
	return func(c *localstack.Config) {
		c.PGClientNetworks = append(c.PGClientNetworks, n.CIDR)
		c.PGSettings = append(c.PGSettings, fmt.Sprintf("listen_addresses = '127.0.0.1, %s'", n.HostAddr))
	}
}

// WithoutKafka starts PostgreSQL only: the stack has no broker and
// Endpoints.KafkaBootstrap is empty. Tests of PostgreSQL alone use it to
// spare the machine a JVM.
func WithoutKafka() PrivateOption {
	return func(c *localstack.Config) { c.PostgresOnly = true }
}

// NewPrivate starts a private stack. It fails the test (never skips it) when
// the stack cannot start.
func NewPrivate(t testing.TB, opts ...PrivateOption) *Private {
	t.Helper()
	dir := testkit.StackDir(t, "eventforge-private-")
	ports := testkit.FreePorts(t, 3)
	p := &Private{
		Config: localstack.Config{
			StateDir:            dir,
			PGPort:              ports[0],
			KafkaPort:           ports[1],
			KafkaControllerPort: ports[2],
		},
		logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, o := range opts {
		o(&p.Config)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// Down stops every PostgreSQL of the state dir, standbys included.
		if err := localstack.Down(ctx, p.Config, p.logger); err != nil {
			t.Errorf("stopping private stack: %v", err)
		}
		if t.Failed() {
			t.Logf("private stack state dir kept for inspection: %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := localstack.Up(ctx, p.Config, p.logger)
	if err != nil {
		t.Fatalf("starting private stack in %s: %v", dir, err)
	}
	p.Endpoints = res.Endpoints
	p.Config.PGVersion = res.PGVersion
	return p
}

// Env migrates the private stack's application database and returns it as
// an Env: the default slot (created), the default topic, and a group name.
// Nothing else shares the stack, so no per-test names are needed; the stack's
// removal cleans up.
func (p *Private) Env(t testing.TB) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := &Env{
		Endpoints:   p.Endpoints,
		Database:    "eventforge",
		DatabaseURL: p.Endpoints.PostgresDSN,
		Slot:        contract.Slot,
		Topic:       localstack.DefaultTopic,
		Group:       "eventforge-fulfillment",
	}
	if err := schema.Migrate(ctx, e.DatabaseURL, p.logger); err != nil {
		t.Fatalf("migrating private stack: %v", err)
	}
	pool, err := pgxpool.New(ctx, e.DatabaseURL)
	if err != nil {
		t.Fatalf("opening pool: %v", err)
	}
	t.Cleanup(pool.Close)
	e.Pool = pool
	if _, err := schema.EnsureSlot(ctx, pool, e.Slot); err != nil {
		t.Fatalf("creating slot: %v", err)
	}
	return e
}

// StopKafka stops the private broker (SIGTERM to its process group) and waits
// until it is gone.
func (p *Private) StopKafka(t testing.TB) {
	t.Helper()
	st := p.status(t)
	if st.Kafka.PID == 0 {
		t.Fatal("stopping private kafka: it does not run")
	}
	if err := syscall.Kill(-st.Kafka.PID, syscall.SIGTERM); err != nil {
		t.Fatalf("stopping private kafka (pid %d): %v", st.Kafka.PID, err)
	}
	waitProcessGone(t, st.Kafka.PID, 2*time.Minute)
}

// StopPostgres stops the private PostgreSQL server: immediate (SIGQUIT: no
// shutdown checkpoint, crash recovery at the next start) or fast (SIGINT).
func (p *Private) StopPostgres(t testing.TB, immediate bool) {
	t.Helper()
	st := p.status(t)
	if st.Postgres.PID == 0 {
		t.Fatal("stopping private postgres: it does not run")
	}
	sig := syscall.SIGINT
	if immediate {
		sig = syscall.SIGQUIT
	}
	if err := syscall.Kill(st.Postgres.PID, sig); err != nil {
		t.Fatalf("stopping private postgres (pid %d): %v", st.Postgres.PID, err)
	}
	waitProcessGone(t, st.Postgres.PID, 2*time.Minute)
}

// RestartPostgres stops the private PostgreSQL server with an immediate
// shutdown (SIGQUIT: no shutdown checkpoint, crash recovery at the start)
// and starts it again after pause. It returns an error instead of failing
// the test, for callers that run off the test's goroutine.
func (p *Private) RestartPostgres(ctx context.Context, pause time.Duration) error {
	st, err := localstack.Status(ctx, p.Config)
	if err != nil {
		return err
	}
	if st.Postgres.PID == 0 {
		return errors.New("postgres does not run")
	}
	if err := syscall.Kill(st.Postgres.PID, syscall.SIGQUIT); err != nil {
		return fmt.Errorf("stopping postgres (pid %d): %w", st.Postgres.PID, err)
	}
	for !processGone(st.Postgres.PID) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(pause):
	}
	_, err = localstack.Up(ctx, p.Config, p.logger)
	return err
}

// Start starts whatever of the private stack is not running (Up is
// idempotent) and waits until both services answer.
func (p *Private) Start(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := localstack.Up(ctx, p.Config, p.logger); err != nil {
		t.Fatalf("restarting private stack: %v", err)
	}
}

func (p *Private) status(t testing.TB) localstack.StatusReport {
	t.Helper()
	st, err := localstack.Status(context.Background(), p.Config)
	if err != nil {
		t.Fatalf("private stack status: %v", err)
	}
	return st
}

// waitProcessGone waits until pid has exited (a zombie counts as gone).
func waitProcessGone(t testing.TB, pid int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still running after %s", pid, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
