package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinels a Handler wraps into its errors so the runtime can classify them.
var (
	// ErrMalformed marks a record that can never be applied as it is: a
	// missing or invalid event ID, or a payload that does not parse. It is
	// permanent: the record goes to the DLQ at once.
	ErrMalformed = errors.New("malformed record")
	// ErrUnknownType marks an event type the handler does not know. It is
	// permanent.
	ErrUnknownType = errors.New("unknown event type")
	// ErrInvalid marks a payload that parses but fails validation (e.g. its
	// order ID differs from the record key). It is permanent.
	ErrInvalid = errors.New("invalid event")
	// ErrNotFound marks an event whose subject (e.g. the order) does not
	// exist. The transaction rolls back, no mark is left, and the event is
	// retried until --max-attempts AND --not-found-grace are both used up,
	// then dead-lettered. The grace matters: logical decoding can hand a
	// transaction to the relay before that transaction is visible to other
	// sessions on the primary, so an event may arrive a moment before the
	// order it names can be read.
	ErrNotFound = errors.New("subject not found")
	// ErrUnavailable marks an attempt that failed because PostgreSQL did
	// not answer or refuses every apply: the transaction could not begin,
	// or it failed while a probe that writes what an apply writes, on a
	// connection of its own, failed too (see probe.go). It says nothing
	// about the event.
	ErrUnavailable = errors.New("database unavailable")
)

// Class is how the runtime treats a failed attempt. Its string form is the
// value of the dlq.error.class header.
type Class string

// Classes of failure.
const (
	// ClassPermanent never succeeds on retry (malformed payload, unknown
	// type, failed validation, data or integrity errors): dead-lettered at
	// once.
	ClassPermanent Class = "permanent"
	// ClassTransient may succeed on retry (serialization failure, deadlock,
	// lock or statement timeout raised by the server, an attempt timeout
	// while the server still answers a probe): retried inline until
	// --max-attempts, then dead-lettered.
	ClassTransient Class = "transient"
	// ClassUnavailable means PostgreSQL could not be reached, dropped the
	// connection, does not answer, or refuses every apply — read-only,
	// permission denied, a missing table, commits that hang
	// (ErrUnavailable). It says nothing about the event, so it is retried
	// inline without an attempt limit and does not count towards
	// --max-attempts: dead-lettering during an outage would move healthy
	// events out of order into the DLQ.
	ClassUnavailable Class = "unavailable"
	// ClassNotFound means the event's subject does not exist (ErrNotFound):
	// retried until --max-attempts and --not-found-grace are used up, then
	// dead-lettered.
	ClassNotFound Class = "not_found"
	// ClassUnknown is any other error: retried until --max-attempts, then
	// dead-lettered.
	ClassUnknown Class = "unknown"
)

// Classes returns every class, in the order of their declaration: the
// values the dlq.error.class header can hold.
func Classes() []Class {
	return []Class{ClassPermanent, ClassTransient, ClassUnavailable, ClassNotFound, ClassUnknown}
}

// Classify returns the class of an attempt's error by the error alone. It
// cannot tell an error that refuses this event from one that refuses every
// event: a timeout without a SQLSTATE (the attempt's deadline,
// pgconn.Timeout) may be a database that hangs or a transaction that is
// slow, and a read-only transaction (25006), a permission denied (42501) or
// a missing table (42P01) may be this event's statement or every write.
// The runtime settles those with a probe and wraps ErrUnavailable into the
// error when the probe fails too (see needsProbe).
func Classify(err error) Class {
	var pgErr *pgconn.PgError
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.Is(err, ErrUnavailable):
		return ClassUnavailable
	case errors.Is(err, ErrMalformed), errors.Is(err, ErrUnknownType), errors.Is(err, ErrInvalid):
		return ClassPermanent
	case errors.Is(err, ErrNotFound):
		return ClassNotFound
	case errors.As(err, &connectErr):
		// No session: refused, timed out, or rejected at startup (even with
		// a SQLSTATE, e.g. a password or database the server refuses).
		return ClassUnavailable
	case errors.As(err, &pgErr):
		// The server answered: its SQLSTATE says what happened, including
		// statement_timeout and lock_timeout (transient).
		return classifySQLState(pgErr.Code)
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return ClassTransient
	case errors.As(err, &netErr), pgconn.SafeToRetry(err):
		return ClassUnavailable
	}
	return ClassUnknown
}

// needsProbe reports whether a failure of class c may mean that PostgreSQL
// refuses, or does not answer, every apply rather than that the event
// failed: any failure that would count towards Options.MaxAttempts
// (transient or unknown), with or without a SQLSTATE. Only a handler's
// verdict (permanent, not found), a data or integrity error and an
// unavailable database are taken as they are. The runtime then probes the
// server before it counts the attempt.
func needsProbe(c Class) bool {
	return c == ClassTransient || c == ClassUnknown
}

// classifySQLState maps a PostgreSQL SQLSTATE to a class (see Appendix A of
// the PostgreSQL manual).
func classifySQLState(code string) Class {
	switch code {
	case "40001", // serialization_failure
		"40P01", // deadlock_detected
		"55P03", // lock_not_available (lock_timeout)
		"57014", // query_canceled (statement_timeout)
		"23505": // unique_violation: a concurrent insert of the same key; retrying sees it
		return ClassTransient
	case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
		return ClassUnavailable
	}
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"): // connection exception, insufficient resources
		return ClassUnavailable
	case strings.HasPrefix(code, "22"), strings.HasPrefix(code, "23"): // data exception, integrity constraint violation
		return ClassPermanent
	}
	// Anything else, an empty or short code among it. Read-only
	// transactions (25006), permission denied (42501), a missing table or
	// column (42P01, 42703) and server errors (58xxx, XX000) land here:
	// they may refuse this event or every event, which the probe settles.
	return ClassUnknown
}

// retryable reports whether a failure of class c after attempts counted
// attempts (unavailable ones do not count), the first of them failing since
// ago, is retried (true) or dead-lettered (false). A missing subject is
// retried for at least notFoundGrace.
func retryable(c Class, attempts, maxAttempts int, since, notFoundGrace time.Duration) bool {
	switch c {
	case ClassPermanent:
		return false
	case ClassUnavailable:
		return true
	case ClassNotFound:
		return attempts < maxAttempts || since < notFoundGrace
	}
	return attempts < maxAttempts
}

// backoff returns the wait before the attempt after attempt (1-based):
// initial·2^(attempt-1) capped at limit, with "equal jitter" (a uniformly
// random value between half of that and all of it), so that partitions that
// failed together do not retry in lockstep.
func backoff(attempt int, initial, limit time.Duration) time.Duration {
	d := initial
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	half := d / 2
	return half + rand.N(d-half+1)
}
