package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// Errors callers branch on.
var (
	// ErrOrderNotFound: no order has the given ID.
	ErrOrderNotFound = errors.New("order not found")
	// ErrUnavailable: the database could not be reached or the transaction
	// was cut off; nothing was committed (or, for a lost COMMIT reply, the
	// caller cannot know — idempotency keys cover that case).
	ErrUnavailable = errors.New("database unavailable")
	// ErrKeyReused: the idempotency key is recorded for a different request;
	// nothing was written.
	ErrKeyReused = errors.New("idempotency key already used for a different request")
	// ErrNotCancellable: the order's status does not allow cancelling it.
	ErrNotCancellable = errors.New("order cannot be cancelled in its current status")
)

// classify wraps connection-level failures with ErrUnavailable so the rpc
// layer can answer UNAVAILABLE; everything else stays an internal error.
func classify(err error) error {
	var (
		pgErr      *pgconn.PgError
		connectErr *pgconn.ConnectError
	)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &connectErr):
		// No connection could be made, whatever the server said (refused,
		// shutting down, database not accepting connections, too many
		// connections): the store is unavailable.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.As(err, &pgErr):
		// Class 08 (connection exception), 57P01..03 (admin shutdown, crash
		// shutdown, cannot connect now), 53300 (too many connections).
		if pgErr.Code[:2] == "08" || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" || pgErr.Code == "53300" {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	case pgconn.SafeToRetry(err), isConnectError(err):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

func isConnectError(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
