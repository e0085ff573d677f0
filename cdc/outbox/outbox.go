// Package outbox names the relay's tables in PostgreSQL: the outbox table
// the writers insert events into, the table of rows the writers deleted
// again (kept by a trigger of the outbox, so that gap recovery and replays
// reach them too), and the relay's own tables, all schema-qualified.
package outbox

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Table is a schema-qualified table name.
type Table pgx.Identifier

// ParseTable parses "schema.table".
func ParseTable(s string) (Table, error) {
	ns, name, ok := strings.Cut(s, ".")
	if !ok {
		return nil, fmt.Errorf("table %q: want schema.table", s)
	}
	return Table{ns, name}, nil
}

// MustParseTable is ParseTable for names a validated configuration holds.
func MustParseTable(s string) Table {
	t, err := ParseTable(s)
	if err != nil {
		panic(err)
	}
	return t
}

// Sanitize quotes the name for an SQL statement.
func (t Table) Sanitize() string { return pgx.Identifier(t).Sanitize() }

// Schema is the table's schema.
func (t Table) Schema() string { return t[0] }

// Name is the table's name without its schema.
func (t Table) Name() string { return t[len(t)-1] }

// Deleted is the table the outbox's deletion trigger keeps deleted rows in:
// <outbox>_deleted in the outbox's schema.
func (t Table) Deleted() Table {
	d := append(Table{}, t...)
	d[len(d)-1] += "_deleted"
	return d
}

// String is the name as "schema.table", as the flags take it.
func (t Table) String() string { return t[0] + "." + t[len(t)-1] }
