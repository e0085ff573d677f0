package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/contract"
)

// walProbe notes when PostgreSQL's walsender sends each outbox transaction:
// a logical replication client of the benchmark on a temporary slot of its
// own (pgoutput, EventForge's publication) that does nothing but take the
// time each transaction's commit message arrives and confirm what it
// received. A walsender sends a transaction only once its commit is flushed
// and decoded, so the probe's time marks the end of what every CDC relay
// waits for in PostgreSQL (commit → WAL flush → decoding → send); the
// relay's own walsender decodes the same WAL, woken by the same flush.
type walProbe struct {
	conn    *pgconn.PgConn
	decoder *decode.Decoder

	mu   sync.Mutex
	sent map[string]time.Time // order ID (aggregateid) → its commit's arrival
	err  error

	received pglogrepl.LSN // the end of the WAL received, for status updates
	cancel   context.CancelFunc
	done     chan struct{}
}

// startWALProbe connects to dsn's database for replication, creates the
// temporary slot (dropped when the connection closes) at the current end of
// the WAL and streams from it until stop.
func startWALProbe(ctx context.Context, dsn string) (*walProbe, error) {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	conn, err := pgconn.Connect(ctx, dsn+sep+"replication=database")
	if err != nil {
		return nil, fmt.Errorf("connecting the walsender probe: %w", err)
	}
	slot := fmt.Sprintf("bench_probe_%d", time.Now().UnixNano())
	// A logical slot is made once the transactions running on the cluster
	// ended: a stuck one elsewhere fails the window rather than hanging it.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	created, err := pglogrepl.CreateReplicationSlot(cctx, conn, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication})
	cancel()
	if err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("creating the probe's slot: %w", err)
	}
	start, err := pglogrepl.ParseLSN(created.ConsistentPoint)
	if err != nil {
		conn.Close(ctx)
		return nil, err
	}
	err = pglogrepl.StartReplication(ctx, conn, slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + contract.Publication + "'"}})
	if err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("starting the probe's stream: %w", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &walProbe{conn: conn, decoder: decode.New("public", "outbox"), sent: map[string]time.Time{},
		received: start, cancel: cancel, done: make(chan struct{})}
	go p.stream(rctx)
	return p, nil
}

// stream receives until ctx ends, answering keepalives and reporting the
// received position every second.
func (p *walProbe) stream(ctx context.Context) {
	defer close(p.done)
	var open []string // the order IDs of the transaction being received
	nextStatus := time.Now().Add(time.Second)
	for ctx.Err() == nil {
		if !time.Now().Before(nextStatus) {
			if err := p.status(ctx); err != nil {
				p.fail(err)
				return
			}
			nextStatus = time.Now().Add(time.Second)
		}
		rctx, cancel := context.WithDeadline(ctx, nextStatus)
		raw, err := p.conn.ReceiveMessage(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case pgconn.Timeout(err):
			continue
		case err != nil:
			p.fail(fmt.Errorf("receiving: %w", err))
			return
		}
		switch m := raw.(type) {
		case *pgproto3.ErrorResponse:
			p.fail(pgconn.ErrorResponseToPgError(m))
			return
		case *pgproto3.CopyData:
			reply, err := p.handle(m.Data, &open)
			if err != nil {
				p.fail(err)
				return
			}
			if reply {
				nextStatus = time.Time{}
			}
		}
	}
}

// handle takes one CopyData frame; reply is true for a keepalive that asks
// for a status update now.
func (p *walProbe) handle(data []byte, open *[]string) (reply bool, err error) {
	if len(data) == 0 {
		return false, nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		return err == nil && k.ReplyRequested, err
	case pglogrepl.XLogDataByteID:
	default:
		return false, nil
	}
	xld, err := pglogrepl.ParseXLogData(data[1:])
	if err != nil {
		return false, err
	}
	msg, err := pglogrepl.Parse(xld.WALData)
	if err != nil {
		return false, fmt.Errorf("decoding at %s: %w", xld.WALStart, err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		return false, p.decoder.Relation(m)
	case *pglogrepl.BeginMessage:
		*open = (*open)[:0]
	case *pglogrepl.InsertMessage:
		ev, ok, err := p.decoder.Insert(m)
		if err != nil && !errors.Is(err, decode.ErrMalformedHeaders) {
			return false, err
		}
		if ok {
			*open = append(*open, ev.AggregateID)
		}
	case *pglogrepl.CommitMessage:
		now := time.Now()
		p.mu.Lock()
		for _, id := range *open {
			if _, seen := p.sent[id]; !seen {
				p.sent[id] = now
			}
		}
		p.received = m.TransactionEndLSN
		p.mu.Unlock()
	}
	return false, nil
}

func (p *walProbe) status(ctx context.Context) error {
	p.mu.Lock()
	pos := p.received
	p.mu.Unlock()
	return pglogrepl.SendStandbyStatusUpdate(ctx, p.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos, WALFlushPosition: pos, WALApplyPosition: pos})
}

func (p *walProbe) fail(err error) {
	p.mu.Lock()
	p.err = fmt.Errorf("walsender probe: %w", err)
	p.mu.Unlock()
}

// orders is the number of orders whose transaction the probe received, or
// its error.
func (p *walProbe) orders() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sent), p.err
}

// sentAt is when the transaction of order arrived.
func (p *walProbe) sentAt(order string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.sent[order]
	return t, ok
}

// stop ends the stream and closes the connection, which drops the slot.
func (p *walProbe) stop() {
	p.cancel()
	<-p.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.conn.Close(ctx)
}
