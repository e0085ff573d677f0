package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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
		{"valid", map[string]string{"id": "0195f5a8-0000-7000-8000-000000000001", "type": "OrderCreated"}, nil},
		{"no id", map[string]string{"type": "OrderCreated"}, ErrMalformed},
		{"bad id", map[string]string{"id": "not-a-uuid", "type": "OrderCreated"}, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := message(topic, 3, 42, "k", tt.headers)
			ev, err := toEvent(m)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if ev.Topic != topic || ev.Partition != 3 || ev.Offset != 42 || ev.Key != "k" || ev.Type != tt.headers["type"] {
				t.Fatalf("event %+v does not carry the record's envelope", ev)
			}
		})
	}
}
