// Package control holds the relay's connections to PostgreSQL: the control
// connection — an ordinary connection that holds the leadership lock for as
// long as it lives, and on which every other statement of the relay runs,
// serialised — and the replication connections the stream and gap recovery
// open. Both probe a dead peer with TCP keepalives.
package control

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// QueryTimeout bounds every statement on the control connection. A
// statement that times out breaks the connection, which releases the
// leadership lock, so the relay stops publishing.
const QueryTimeout = 15 * time.Second

// Conn is the relay's control connection. Statements on it are serialised.
type Conn struct {
	mu   sync.Mutex
	conn *pgx.Conn
	// dial, when set, reconnects a closed connection before the next
	// statement (OpenSlotConn); the control connection never reconnects:
	// its leadership lock ends with it.
	dial func(ctx context.Context) (*pgx.Conn, error)
}

// New wraps an open connection; Open connects one as the relay does.
func New(conn *pgx.Conn) *Conn { return &Conn{conn: conn} }

// Open connects the control connection to databaseURL.
func Open(ctx context.Context, databaseURL string) (*Conn, error) {
	pcfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, Permanentf("parsing database-url: %w", err)
	}
	maps.Copy(pcfg.RuntimeParams, deadPeerParams)
	pcfg.RuntimeParams["application_name"] = "eventforge-cdc-control"
	conn, err := pgx.ConnectConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	return New(conn), nil
}

// OpenSlotConn connects to the server at databaseURL that holds the
// replication slot when it is not the control connection's — a standby the
// relay decodes on (docs/cdc.md, "Decoding on a standby"). It holds no lock,
// so it reconnects by itself: a statement after the connection broke (the
// standby restarted) dials again.
func OpenSlotConn(ctx context.Context, databaseURL string) (*Conn, error) {
	pcfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, Permanentf("parsing replication-url: %w", err)
	}
	maps.Copy(pcfg.RuntimeParams, deadPeerParams)
	pcfg.RuntimeParams["application_name"] = "eventforge-cdc-slot"
	dial := func(ctx context.Context) (*pgx.Conn, error) {
		conn, err := pgx.ConnectConfig(ctx, pcfg.Copy())
		if err != nil {
			return nil, fmt.Errorf("connecting to the replication server: %w", err)
		}
		return conn, nil
	}
	conn, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	return &Conn{conn: conn, dial: dial}, nil
}

// Do runs f on the connection, alone and within QueryTimeout.
func (c *Conn) Do(ctx context.Context, f func(ctx context.Context, conn *pgx.Conn) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, QueryTimeout)
	defer cancel()
	if c.dial != nil && c.conn.IsClosed() {
		conn, err := c.dial(ctx)
		if err != nil {
			return err
		}
		c.conn = conn
	}
	return f(ctx, c.conn)
}

// Closed reports whether the connection is closed, and with it the
// leadership lock released.
func (c *Conn) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn.IsClosed()
}

// Database is the name of the database the connection is to.
func (c *Conn) Database() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn.Config().Database
}

// PID is the server process of the connection.
func (c *Conn) PID() uint32 { return c.conn.PgConn().PID() }

// Close closes the connection, releasing the leadership lock.
func (c *Conn) Close(ctx context.Context) error { return c.conn.Close(ctx) }

// OpenReplication opens a replication connection to the database of
// databaseURL.
func OpenReplication(ctx context.Context, databaseURL string) (*pgconn.PgConn, error) {
	connCfg, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		return nil, Permanentf("parsing database-url: %w", err)
	}
	maps.Copy(connCfg.RuntimeParams, deadPeerParams)
	connCfg.RuntimeParams["replication"] = "database"
	connCfg.RuntimeParams["application_name"] = "eventforge-cdc"
	// The walsender ends a replication connection that sent no status
	// update for this long; the relay sends one every status interval.
	connCfg.RuntimeParams["wal_sender_timeout"] = "30s"
	conn, err := pgconn.ConnectConfig(ctx, connCfg)
	if err != nil {
		return nil, fmt.Errorf("opening replication connection: %w", err)
	}
	return conn, nil
}

// deadPeerParams make the server give up on a relay lost with its host or
// network in about 25 s instead of the kernel's defaults, so that the
// leadership lock and the slot are released for a standby: TCP keepalives
// probe an idle connection, and tcp_user_timeout bounds how long data the
// server sent may stay unacknowledged — a connection cut while a reply was
// on its way is retransmitted, not probed, and would otherwise hold the
// lock for the kernel's retransmission limit (about 15 minutes).
var deadPeerParams = map[string]string{
	"tcp_keepalives_idle":     "10",
	"tcp_keepalives_interval": "5",
	"tcp_keepalives_count":    "3",
	"tcp_user_timeout":        "25000",
}
