package control

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// PermanentError marks errors that reconnecting cannot fix (configuration,
// schema): the relay returns them instead of retrying.
type PermanentError struct{ Err error }

func (e PermanentError) Error() string { return e.Err.Error() }
func (e PermanentError) Unwrap() error { return e.Err }

// Permanentf formats a PermanentError.
func Permanentf(format string, args ...any) error {
	return PermanentError{fmt.Errorf(format, args...)}
}

// IsPermanent reports whether err is, or wraps, a PermanentError.
func IsPermanent(err error) bool {
	var perm PermanentError
	return errors.As(err, &perm)
}

// IsCode reports whether err is a PostgreSQL error with the SQLSTATE code.
func IsCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// LSN scans a text LSN into *Dst.
type LSN struct{ Dst *pglogrepl.LSN }

// Scan implements sql.Scanner.
func (p LSN) Scan(src any) error {
	s, ok := src.(string)
	if !ok {
		return fmt.Errorf("lsn: unexpected %T", src)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return err
	}
	*p.Dst = lsn
	return nil
}
