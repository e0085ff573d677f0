package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testkit"
)

// Standby is a streaming standby of a private stack's PostgreSQL, on its own
// free port. The private stack's cleanup stops it with the primary.
type Standby struct {
	// Endpoints are the standby's DSNs; KafkaBootstrap is the stack's.
	Endpoints localstack.Endpoints
	// Name is its application_name and its physical slot on the primary.
	Name string
	// Port is its port on 127.0.0.1.
	Port int

	p *Private
	s *localstack.Standby
}

// StandbyOption configures AddStandby.
type StandbyOption func(*localstack.StandbyConfig)

// Synchronous makes the standby synchronous (the primary's
// synchronous_standby_names): a commit returns only once the standby has
// flushed it, so every acknowledged commit survives a failover.
func Synchronous() StandbyOption {
	return func(c *localstack.StandbyConfig) { c.Synchronous = true }
}

// FailoverSlotSync (PostgreSQL 17+) synchronises failover logical slots to
// the standby: sync_replication_slots=on on the standby and
// synchronized_standby_slots naming its physical slot on the primary.
func FailoverSlotSync() StandbyOption {
	return func(c *localstack.StandbyConfig) { c.SyncSlots = true }
}

// StandbyName names the standby (its application_name and physical slot)
// instead of localstack.DefaultStandbyName.
func StandbyName(name string) StandbyOption {
	return func(c *localstack.StandbyConfig) { c.Name = name }
}

// StandbySettings appends postgresql.conf lines to the standby's settings.
func StandbySettings(lines ...string) StandbyOption {
	return func(c *localstack.StandbyConfig) { c.Settings = append(c.Settings, lines...) }
}

// AddStandby builds a streaming standby of the private stack's running
// PostgreSQL (no pg_basebackup: the primary is stopped cleanly for a moment
// and its data dir copied) and waits until it streams, and with Synchronous
// until it is the synchronous standby. Add it before starting the processes
// under test: their connections to the primary are cut by the restart.
func (p *Private) AddStandby(t testing.TB, opts ...StandbyOption) *Standby {
	t.Helper()
	cfg := localstack.StandbyConfig{Port: testkit.FreePorts(t, 1)[0]}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := localstack.AddStandby(ctx, p.Config, cfg, p.logger)
	if err != nil {
		t.Fatalf("adding a standby to the private stack: %v", err)
	}
	return &Standby{Endpoints: s.Endpoints, Name: s.Name, Port: s.Port, p: p, s: s}
}

// KillPrimary SIGKILLs the private stack's postmaster and waits until it and
// all its children are gone.
func (p *Private) KillPrimary(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := localstack.KillPostgres(ctx, p.Config); err != nil {
		t.Fatalf("killing the private primary: %v", err)
	}
}

// Promote promotes the standby and waits until it accepts writes.
func (s *Standby) Promote(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := s.s.Promote(ctx); err != nil {
		t.Fatalf("promoting standby %s: %v", s.Name, err)
	}
}

// Failover SIGKILLs the private stack's primary and promotes s. It returns
// an error instead of failing the test, for callers that run off the
// test's goroutine.
func (s *Standby) Failover(ctx context.Context) error {
	if _, err := localstack.KillPostgres(ctx, s.p.Config); err != nil {
		return fmt.Errorf("killing the primary: %w", err)
	}
	if err := s.s.Promote(ctx); err != nil {
		return fmt.Errorf("promoting standby %s: %w", s.Name, err)
	}
	return nil
}

// PID returns the standby's postmaster pid, 0 when it does not run.
func (s *Standby) PID() int { return s.s.PID() }

// WaitSlotSynced waits (PostgreSQL 17+) until the failover logical slot
// named slot exists on the standby as synced AND NOT temporary. Only such a
// slot survives a promotion: a synced slot stays temporary until the
// primary's slot has advanced past the position the standby created it at,
// and a temporary one is dropped on promotion. The slot sync worker naps up
// to 30 s between rounds, so timeout should allow a minute or more. While
// waiting it logs a standby snapshot on the primary every round (the
// running-transactions record a logical slot's restart point advances to);
// the slot itself must be advanced by its reader.
func (s *Standby) WaitSlotSynced(t testing.TB, slot string, timeout time.Duration) {
	t.Helper()
	waitSlotSynced(t, s.p.Config.PGVersion, s.p.Endpoints.AdminDSN, s.Endpoints.AdminDSN, slot, timeout)
}

// waitSlotSynced is WaitSlotSynced for the standby at standbyDSN of the
// primary at primaryDSN (admin DSNs).
func waitSlotSynced(t testing.TB, version int, primaryDSN, standbyDSN, slot string, timeout time.Duration) {
	t.Helper()
	if version < 17 {
		t.Fatalf("waiting for slot %s to sync: PostgreSQL %d does not synchronise slots (17+ does)", slot, version)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	Eventually(t, timeout, "slot "+slot+" synced and not temporary on the standby", func() error {
		if err := localstack.ExecOnce(ctx, primaryDSN, `SELECT pg_log_standby_snapshot()`); err != nil {
			return fmt.Errorf("logging a standby snapshot on the primary: %w", err)
		}
		conn, err := pgx.Connect(ctx, standbyDSN)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		var synced, temporary bool
		err = conn.QueryRow(ctx, `SELECT synced, temporary FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&synced, &temporary)
		if errors.Is(err, pgx.ErrNoRows) {
			return errors.New("not on the standby yet")
		}
		if err != nil {
			return err
		}
		if !synced || temporary {
			return fmt.Errorf("synced=%v temporary=%v", synced, temporary)
		}
		return nil
	})
}

// MultiHostDSN returns dsn (a DSN of the private primary, such as an Env's
// DatabaseURL) with the standby as a second host and
// target_session_attrs=primary, so a client connects to whichever of the two
// accepts writes — the primary, or the standby once promoted.
func (s *Standby) MultiHostDSN(t testing.TB, dsn string) string {
	t.Helper()
	return MultiHostDSN(t, dsn, s.p.Config.PGPort, s.Port)
}

// MultiHostDSN returns dsn with its host replaced by 127.0.0.1 on each of
// ports, tried in that order, and target_session_attrs=primary:
// postgres://u:p@127.0.0.1:P1,127.0.0.1:P2/db?sslmode=disable&target_session_attrs=primary.
func MultiHostDSN(t testing.TB, dsn string, ports ...int) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parsing dsn: %v", err)
	}
	hosts := make([]string, len(ports))
	for i, p := range ports {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	u.Host = strings.Join(hosts, ",")
	q := u.Query()
	q.Set("target_session_attrs", "primary")
	u.RawQuery = q.Encode()
	return u.String()
}
