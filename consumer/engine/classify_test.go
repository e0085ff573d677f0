package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventforge/eventforge/contract"
)

func TestClassify(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("applying: %w", &pgconn.PgError{Code: code}) }
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"malformed", fmt.Errorf("x: %w", ErrMalformed), ClassPermanent},
		{"unknown type", fmt.Errorf("x: %w", ErrUnknownType), ClassPermanent},
		{"invalid", fmt.Errorf("x: %w", ErrInvalid), ClassPermanent},
		{"not found", fmt.Errorf("order 1: %w", fmt.Errorf("order not found: %w", ErrNotFound)), ClassNotFound},
		{"attempt timeout", fmt.Errorf("x: %w", context.DeadlineExceeded), ClassTransient},
		{"unavailable", fmt.Errorf("%w: beginning a transaction: %w", ErrUnavailable, context.DeadlineExceeded), ClassUnavailable},
		{"statement timeout at the deadline", fmt.Errorf("%w: %w", context.DeadlineExceeded, &pgconn.PgError{Code: "57014"}), ClassTransient},
		{"connect rejected by the server", &pgconn.ConnectError{}, ClassUnavailable},
		{"serialization failure", pg("40001"), ClassTransient},
		{"deadlock", pg("40P01"), ClassTransient},
		{"lock timeout", pg("55P03"), ClassTransient},
		{"statement timeout", pg("57014"), ClassTransient},
		{"unique violation", pg("23505"), ClassTransient},
		{"check violation", pg("23514"), ClassPermanent},
		{"foreign key violation", pg("23503"), ClassPermanent},
		{"bad data", pg("22P02"), ClassPermanent},
		{"connection failure", pg("08006"), ClassUnavailable},
		{"admin shutdown", pg("57P01"), ClassUnavailable},
		{"too many connections", pg("53300"), ClassUnavailable},
		{"undefined table", pg("42P01"), ClassUnknown},
		{"empty sqlstate", pg(""), ClassUnknown},
		{"one-character sqlstate", pg("5"), ClassUnknown},
		{"connection refused", &pgconn.ConnectError{}, ClassUnavailable},
		{"other", io.ErrUnexpectedEOF, ClassUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Fatalf("Classify(%v) = %s, want %s", tt.err, got, tt.want)
			}
		})
	}
}

// fakeDB is a DB whose methods are the funcs given (nil: fail the test).
type fakeDB struct {
	t     *testing.T
	begin func(ctx context.Context) (pgx.Tx, error)
	probe func(ctx context.Context) error
}

func (db fakeDB) Begin(ctx context.Context) (pgx.Tx, error) {
	if db.begin == nil {
		db.t.Error("unexpected Begin")
		return nil, errors.New("unexpected Begin")
	}
	return db.begin(ctx)
}

func (db fakeDB) Probe(ctx context.Context, _ func(context.Context, pgx.Tx) error) error {
	if db.probe == nil {
		db.t.Error("unexpected Probe")
		return errors.New("unexpected Probe")
	}
	return db.probe(ctx)
}

// TestClassifyProbes: a failure that would count towards the attempts
// (transient or unknown), with or without a SQLSTATE, is settled by a
// probe; a failed probe makes the attempt unavailable, a probe that commits
// leaves the class as it was. A handler's verdict, a data error and an
// unavailable database are never probed.
func TestClassifyProbes(t *testing.T) {
	hang := errors.New("no answer")
	tests := []struct {
		name      string
		err       error
		probeErr  error // nil: the server answers
		probed    bool
		want      Class
		wantUnavl bool
	}{
		{"attempt timeout, server hangs", fmt.Errorf("marking 1 events: %w", context.DeadlineExceeded), hang, true, ClassUnavailable, true},
		{"attempt timeout, server answers", fmt.Errorf("marking 1 events: %w", context.DeadlineExceeded), nil, true, ClassTransient, false},
		{"broken connection, server gone", fmt.Errorf("x: %w", io.ErrUnexpectedEOF), hang, true, ClassUnavailable, true},
		{"unknown error, server answers", fmt.Errorf("x: %w", io.ErrUnexpectedEOF), nil, true, ClassUnknown, false},
		{"statement timeout, server hangs", &pgconn.PgError{Code: "57014"}, hang, true, ClassUnavailable, true},
		{"lock timeout, server answers", &pgconn.PgError{Code: "55P03"}, nil, true, ClassTransient, false},
		{"read-only, probe refused too", &pgconn.PgError{Code: "25006"}, &pgconn.PgError{Code: "25006"}, true, ClassUnavailable, true},
		{"permission denied, probe refused too", &pgconn.PgError{Code: "42501"}, &pgconn.PgError{Code: "42501"}, true, ClassUnavailable, true},
		{"undefined table, probe commits", &pgconn.PgError{Code: "42P01"}, nil, true, ClassUnknown, false},
		{"I/O error, probe refused too", &pgconn.PgError{Code: "58030"}, &pgconn.PgError{Code: "58030"}, true, ClassUnavailable, true},
		{"deadlock, probe commits", &pgconn.PgError{Code: "40P01"}, nil, true, ClassTransient, false},
		{"panic", fmt.Errorf("%w: boom", ErrPanic), nil, true, ClassUnknown, false},
		{"bad data", &pgconn.PgError{Code: "22P02"}, hang, false, ClassPermanent, false},
		{"not found", fmt.Errorf("x: %w", ErrNotFound), hang, false, ClassNotFound, false},
		{"permanent", fmt.Errorf("x: %w", ErrInvalid), hang, false, ClassPermanent, false},
		{"could not begin", fmt.Errorf("%w: x: %w", ErrUnavailable, context.DeadlineExceeded), nil, false, ClassUnavailable, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probed := false
			db := fakeDB{t: t, probe: func(ctx context.Context) error {
				probed = true
				if _, ok := ctx.Deadline(); !ok {
					t.Error("probe without a deadline")
				}
				return tt.probeErr
			}}
			r := New(Options{Name: "classify"}, db, fakeHandler{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			got, err := r.classify(context.Background(), tt.err)
			if got != tt.want || probed != tt.probed {
				t.Fatalf("classify(%v) = %s (probed %v), want %s (probed %v)", tt.err, got, probed, tt.want, tt.probed)
			}
			if !errors.Is(err, tt.err) || errors.Is(err, ErrUnavailable) != tt.wantUnavl {
				t.Fatalf("classify returned %v; want it to wrap %v, and ErrUnavailable: %v", err, tt.err, tt.wantUnavl)
			}
		})
	}
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		class    Class
		attempts int
		since    time.Duration
		want     bool
	}{
		{ClassPermanent, 1, 0, false},
		{ClassTransient, 1, 0, true},
		{ClassTransient, 4, 0, true},
		{ClassTransient, 5, 0, false},
		{ClassTransient, 5, time.Second, false},
		{ClassNotFound, 5, 0, true},                 // attempts used up, grace not
		{ClassNotFound, 5, 11 * time.Second, false}, // both used up
		{ClassNotFound, 2, 11 * time.Second, true},  // grace used up, attempts not
		{ClassUnknown, 2, 0, true},
		{ClassUnavailable, 500, time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d/%s", tt.class, tt.attempts, tt.since), func(t *testing.T) {
			if got := retryable(tt.class, tt.attempts, 5, tt.since, 10*time.Second); got != tt.want {
				t.Fatalf("retryable(%s, %d, 5, %s, 10s) = %v, want %v", tt.class, tt.attempts, tt.since, got, tt.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	const initial, limit = 100 * time.Millisecond, time.Second
	tests := []struct {
		attempt  int
		lo, high time.Duration
	}{
		{1, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 200 * time.Millisecond},
		{4, 400 * time.Millisecond, 800 * time.Millisecond},
		{5, 500 * time.Millisecond, time.Second},
		{50, 500 * time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.attempt), func(t *testing.T) {
			for range 200 {
				if d := backoff(tt.attempt, initial, limit); d < tt.lo || d > tt.high {
					t.Fatalf("backoff(%d) = %s, want within [%s, %s]", tt.attempt, d, tt.lo, tt.high)
				}
			}
		})
	}
}

func TestToEvent(t *testing.T) {
	topic := "orders"
	tests := []struct {
		name    string
		headers map[string]string
		wantErr error
	}{
		{"valid", map[string]string{contract.HeaderID: "0195f5a8-0000-7000-8000-000000000001", contract.HeaderType: contract.TypeOrderCreated}, nil},
		{"no id", map[string]string{contract.HeaderType: contract.TypeOrderCreated}, ErrMalformed},
		{"bad id", map[string]string{contract.HeaderID: "not-a-uuid", contract.HeaderType: contract.TypeOrderCreated}, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := message(topic, 3, 42, "k", tt.headers)
			ev, err := toEvent(m)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if ev.Topic != topic || ev.Partition != 3 || ev.Offset != 42 || ev.Key != "k" || ev.Type != tt.headers[contract.HeaderType] {
				t.Fatalf("event %+v does not carry the record's envelope", ev)
			}
		})
	}
}
