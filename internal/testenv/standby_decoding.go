package testenv

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/schema"
)

// DecodeOnStandby makes the Env's relay decode on s (PostgreSQL 16+): its
// ReplicationURL is s's DSN of the Env's database and SlotPool a pool on it,
// where the relay's slot is read. The slot the Env made on the primary is
// dropped — the relay creates its own on the standby — so it retains no WAL
// there.
func (e *Env) DecodeOnStandby(t testing.TB, s *Standby) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, err := url.Parse(s.Endpoints.PostgresDSN)
	if err != nil {
		t.Fatalf("parsing the standby's dsn: %v", err)
	}
	u.Path = "/" + e.Database
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatalf("opening pool on the standby: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := schema.DropSlotsIfExist(ctx, e.Pool, e.Slot); err != nil {
		t.Fatalf("dropping the primary's slot %s: %v", e.Slot, err)
	}
	e.ReplicationURL, e.SlotPool = u.String(), pool
}

// Restart restarts the standby — an immediate shutdown (crash recovery at
// the start) when immediate, else a fast one — and waits until it streams
// from the primary again. It returns an error instead of failing the test,
// for callers that run off the test's goroutine.
func (s *Standby) Restart(ctx context.Context, immediate bool) error {
	return s.s.Restart(ctx, s.p.Endpoints.AdminDSN, immediate, s.p.logger)
}
