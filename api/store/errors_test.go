package store

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// unsent is an error whose bytes never reached the connection, as pgconn
// reports a failed write of nothing.
type unsent struct{}

func (unsent) Error() string     { return "write failed before any byte" }
func (unsent) SafeToRetry() bool { return true }

func TestOutcomeOf(t *testing.T) {
	refusedDE := &pgconn.PgError{Severity: "FEHLER", SeverityUnlocalized: "ERROR", Code: "23514"}
	fatal := &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}
	tests := []struct {
		name       string
		err        error
		commitSent bool
		want       error
	}{
		{"refused, in German", fmt.Errorf("creating: %w", refusedDE), true, ErrNotWritten},
		{"commit answered ROLLBACK", pgx.ErrTxCommitRollback, true, ErrNotWritten},
		{"connection lost before the commit", io.ErrUnexpectedEOF, false, ErrNotWritten},
		{"nothing of the commit sent", fmt.Errorf("sync: %w", unsent{}), true, ErrNotWritten},
		{"connection lost after the commit", io.ErrUnexpectedEOF, true, ErrOutcomeUnknown},
		{"backend terminated after the commit", fatal, true, ErrOutcomeUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := outcomeOf(tt.err, attempt{commitSent: tt.commitSent}); !errors.Is(got, tt.want) {
				t.Fatalf("outcomeOf(%v, commit sent %v) = %v, want %v", tt.err, tt.commitSent, got, tt.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		code string
		want error // nil: left as it is
	}{
		{"40001", ErrRetryable}, {"40P01", ErrRetryable}, {"55P03", ErrRetryable}, {"57014", ErrRetryable},
		{"53100", ErrRetryable}, {"53200", ErrRetryable}, {"53300", ErrRetryable},
		{"08006", ErrUnavailable}, {"57P01", ErrUnavailable}, {"57P03", ErrUnavailable},
		{"23505", nil}, {"23514", nil}, {"42P01", nil},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			err := classify(&pgconn.PgError{Code: tt.code, SeverityUnlocalized: "ERROR"})
			for _, cause := range []error{ErrRetryable, ErrUnavailable} {
				if errors.Is(err, cause) != errors.Is(tt.want, cause) {
					t.Fatalf("classify(%s) = %v; want it marked %v", tt.code, err, tt.want)
				}
			}
		})
	}
}
