package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/consumer/dlq"
)

type dlqListCmd struct {
	dlqTopicFlags
	dlqFilterFlags
	State       string `name:"state" enum:"pending,replayed,purged,all" default:"all" help:"Only records in this state: pending (not replayed since dead-lettered), replayed (a replay of the event was published since), purged (deleted by dlq purge, read from dlq_purged), or all."`
	DatabaseURL string `name:"database-url" log:"url" help:"PostgreSQL connection URL, for the purged records (dlq_purged); with --state all they are left out, with a notice, when it cannot be reached." default:"${database_url}"`
	Limit       int    `name:"limit" help:"Print at most this many records (the counts cover all that match; 0 = all)." default:"100"`
	JSON        bool   `name:"json" help:"Print one JSON object per record instead of a table."`
}

// listRow is one record of the list with its state; replayed or purged is
// when it was, zero for a pending one.
type listRow struct {
	dlq.Entry
	state dlq.State
	at    time.Time
}

// listing is what the list counted.
type listing struct {
	held    int
	states  map[dlq.State]int // every record, whatever the filters
	summary dlq.Summary       // the records that match
	rows    []listRow
}

func (c *dlqListCmd) Run(env *runEnv) error {
	want, err := dlq.ParseState(c.State)
	if err != nil {
		return err
	}
	r, err := dlq.NewReader(c.KafkaBrokers)
	if err != nil {
		return err
	}
	defer r.Close()
	now, f := time.Now(), c.filter()
	enc := json.NewEncoder(os.Stdout)
	l := &listing{states: map[dlq.State]int{}, summary: dlq.NewSummary()}
	add := func(row listRow) error {
		l.states[row.state]++
		if (want != "" && row.state != want) || !f.Match(row.Entry, now) {
			return nil
		}
		if c.JSON {
			return enc.Encode(rowJSON(row))
		}
		l.summary.Add(row.Entry)
		if c.Limit == 0 || len(l.rows) < c.Limit {
			row.Value = nil // the table shows no payload
			l.rows = append(l.rows, row)
		}
		return nil
	}
	if want != dlq.StatePurged {
		if err := c.listHeld(env, r, l, add); err != nil {
			return err
		}
	}
	if want == dlq.StatePurged || want == "" {
		if err := c.listPurged(env, add); err != nil {
			if want == dlq.StatePurged {
				return err
			}
			fmt.Fprintf(os.Stderr, "purged records left out: %v\n", err)
		}
	}
	if !c.JSON {
		printList(os.Stdout, c.Topic, l, now)
	}
	return nil
}

// listHeld passes every record the DLQ topic holds to add, with its state
// (dlq.Replays, read from each original topic from the time of the oldest
// record held).
func (c *dlqListCmd) listHeld(env *runEnv, r *kafka.Consumer, l *listing, add func(listRow) error) error {
	st, err := dlq.ReadStats(env.ctx, r, c.Topic)
	if errors.Is(err, dlq.ErrNoTopic) {
		return nil // nothing was ever dead-lettered there
	}
	if err != nil {
		return err
	}
	idx := &replayIndex{brokers: c.KafkaBrokers, since: st.Oldest, read: map[string]bool{}}
	defer idx.close()
	return c.scan(env, r, func(e dlq.Entry) error {
		l.held++
		at, ok, err := idx.replayedAt(env, e)
		if err != nil {
			return err
		}
		row := listRow{Entry: e, state: dlq.StatePending}
		if ok {
			row.state, row.at = dlq.StateReplayed, at
		}
		return add(row)
	})
}

// listPurged passes the records dlq_purged holds for the topic to add.
func (c *dlqListCmd) listPurged(env *runEnv, add func(listRow) error) error {
	conn, err := pgx.Connect(env.ctx, c.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connecting to postgres for dlq_purged: %w", err)
	}
	defer conn.Close(env.ctx)
	ps, err := dlq.ReadPurged(env.ctx, conn, c.Topic, 0)
	if err != nil {
		return err
	}
	for _, p := range ps {
		e := dlq.Entry{Topic: c.Topic, Partition: p.Partition, Offset: p.Offset, Timestamp: p.DeadLetteredAt, Key: []byte(p.OrderID),
			EventID: p.EventID, Type: p.Type, Consumer: p.Consumer, Class: p.Class}
		if err := add(listRow{Entry: e, state: dlq.StatePurged, at: p.PurgedAt}); err != nil {
			return err
		}
	}
	return nil
}

// replayIndex reads the replays of each original topic the first time an
// entry names it, with a reader of its own (the DLQ's is scanning).
type replayIndex struct {
	brokers string
	since   time.Time
	c       *kafka.Consumer
	read    map[string]bool
	replays dlq.Replays
}

func (x *replayIndex) replayedAt(env *runEnv, e dlq.Entry) (time.Time, bool, error) {
	if t := e.OriginalTopic; t != "" && !x.read[t] {
		x.read[t] = true
		if x.c == nil {
			c, err := dlq.NewReader(x.brokers)
			if err != nil {
				return time.Time{}, false, err
			}
			x.c = c
		}
		from, err := dlq.ReplayOffsets(x.c, t, x.since)
		if err == nil {
			_, err = dlq.ScanReplays(env.ctx, x.c, t, from, &x.replays)
		}
		if err != nil && !errors.Is(err, dlq.ErrNoTopic) {
			return time.Time{}, false, fmt.Errorf("reading the replays in %s: %w", t, err)
		}
	}
	at, ok := x.replays.ReplayedAt(e)
	return at, ok, nil
}

func (x *replayIndex) close() {
	if x.c != nil {
		x.c.Close()
	}
}

// rowJSON is entryJSON with the state and, for a replayed or purged
// record, when it was.
func rowJSON(row listRow) map[string]any {
	m := entryJSON(row.Entry, false)
	m["state"] = row.state
	switch row.state {
	case dlq.StateReplayed:
		m["replayed_at"] = row.at
	case dlq.StatePurged:
		m["purged_at"] = row.at
	}
	return m
}

// printList prints the counts of l and the table of its rows, the first of
// the records that match.
func printList(w io.Writer, topic string, l *listing, now time.Time) {
	s := l.summary
	fmt.Fprintf(w, "%s: %d records held, %d match\n", topic, l.held, s.Total)
	if len(l.states) > 0 {
		fmt.Fprintf(w, "by state:    pending=%d replayed=%d purged=%d\n", l.states[dlq.StatePending], l.states[dlq.StateReplayed], l.states[dlq.StatePurged])
	}
	if s.Total == 0 {
		return
	}
	fmt.Fprintf(w, "oldest %s ago, newest %s ago\n", age(now, s.Oldest), age(now, s.Newest))
	fmt.Fprintf(w, "by consumer: %s\nby class:    %s\nby type:     %s\n\n", counts(s.ByConsumer), counts(s.ByClass), counts(s.ByType))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POSITION\tSTATE\tAGE\tCONSUMER\tCLASS\tATTEMPTS\tTYPE\tEVENT ID\tKEY\tERROR")
	for _, e := range l.rows {
		state := string(e.state)
		if !e.at.IsZero() {
			state += " " + age(now, e.at) + " ago"
		}
		if state == "" {
			state = "-"
		}
		fmt.Fprintf(tw, "%d:%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.Partition, e.Offset, state, age(now, e.Timestamp), e.Consumer, e.Class,
			e.Attempts, e.Type, e.EventID, e.Key, oneLine(e.Message, 100))
	}
	if more := s.Total - len(l.rows); more > 0 {
		fmt.Fprintf(tw, "… %d more (raise --limit)\n", more)
	}
	tw.Flush()
}
