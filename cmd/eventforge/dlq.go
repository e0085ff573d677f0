package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/schollz/progressbar/v3"

	"github.com/eventforge/eventforge/consumer/dlq"
)

// dlqCmd is `eventforge dlq`: triage of dead-lettered records.
type dlqCmd struct {
	List   dlqListCmd   `cmd:"" help:"List dead-lettered records with counts and ages (filters narrow it)."`
	Show   dlqShowCmd   `cmd:"" help:"Show one dead-lettered record in full: headers and payload."`
	Replay dlqReplayCmd `cmd:"" help:"Republish dead-lettered records to their original topic with their original key, value and event ID."`
	Purge  dlqPurgeCmd  `cmd:"" help:"Delete dead-lettered records (all, or those older than --older-than)."`
}

// dlqTopicFlags name the DLQ topic.
type dlqTopicFlags struct {
	KafkaBrokers string `name:"kafka-brokers" help:"Kafka bootstrap servers." default:"${kafka_brokers}"`
	Topic        string `name:"topic" help:"DLQ topic." default:"${topic}.dlq"`
}

// dlqFilterFlags select records.
type dlqFilterFlags struct {
	Consumer  string        `name:"consumer" help:"Only records dead-lettered by this consumer (fulfillment, ledger)."`
	Class     string        `name:"class" help:"Only this error class (permanent, transient, not_found, unavailable, unknown)."`
	Type      string        `name:"type" help:"Only this event type, e.g. OrderCreated."`
	EventID   string        `name:"event-id" help:"Only this event ID."`
	Key       string        `name:"key" help:"Only this record key (order ID)."`
	Contains  string        `name:"contains" help:"Only records whose error message contains this text."`
	OlderThan time.Duration `name:"older-than" help:"Only records dead-lettered at least this long ago."`
	NewerThan time.Duration `name:"newer-than" help:"Only records dead-lettered at most this long ago."`
}

func (f dlqFilterFlags) filter() dlq.Filter {
	return dlq.Filter{Consumer: f.Consumer, Class: f.Class, Type: f.Type, EventID: f.EventID, Key: f.Key,
		Contains: f.Contains, OlderThan: f.OlderThan, NewerThan: f.NewerThan}
}

func (f dlqTopicFlags) read(env *runEnv) ([]dlq.Entry, error) {
	c, err := dlq.NewReader(f.KafkaBrokers)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	es, err := dlq.Read(env.ctx, c, f.Topic)
	if errors.Is(err, dlq.ErrNoTopic) {
		return nil, nil // nothing was ever dead-lettered there
	}
	return es, err
}

type dlqListCmd struct {
	dlqTopicFlags
	dlqFilterFlags
	Limit int  `name:"limit" help:"Print at most this many records (the counts cover all that match; 0 = all)." default:"100"`
	JSON  bool `name:"json" help:"Print one JSON object per record instead of a table."`
}

func (c *dlqListCmd) Run(env *runEnv) error {
	all, err := c.read(env)
	if err != nil {
		return err
	}
	now := time.Now()
	es := dlq.Select(all, c.filter(), now)
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		for _, e := range es {
			if err := enc.Encode(entryJSON(e, false)); err != nil {
				return err
			}
		}
		return nil
	}
	printList(os.Stdout, c.Topic, len(all), es, c.Limit, now)
	return nil
}

// printList prints the summary and the table of es.
func printList(w io.Writer, topic string, held int, es []dlq.Entry, limit int, now time.Time) {
	s := dlq.Summarize(es)
	fmt.Fprintf(w, "%s: %d records held, %d match\n", topic, held, s.Total)
	if s.Total == 0 {
		return
	}
	fmt.Fprintf(w, "oldest %s ago, newest %s ago\n", age(now, s.Oldest), age(now, s.Newest))
	fmt.Fprintf(w, "by consumer: %s\nby class:    %s\nby type:     %s\n\n", counts(s.ByConsumer), counts(s.ByClass), counts(s.ByType))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POSITION\tAGE\tCONSUMER\tCLASS\tATTEMPTS\tTYPE\tEVENT ID\tKEY\tERROR")
	for i, e := range es {
		if limit > 0 && i == limit {
			fmt.Fprintf(tw, "… %d more (raise --limit)\n", len(es)-limit)
			break
		}
		fmt.Fprintf(tw, "%d:%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.Partition, e.Offset, age(now, e.Timestamp), e.Consumer, e.Class,
			e.Attempts, e.Type, e.EventID, e.Key, oneLine(e.Message, 100))
	}
	tw.Flush()
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts[i] = fmt.Sprintf("%s=%d", name, m[k])
	}
	return strings.Join(parts, " ")
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return now.Sub(t).Truncate(time.Second).String()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// entryJSON is the JSON form of an entry; payload is included on request.
func entryJSON(e dlq.Entry, withPayload bool) map[string]any {
	headers := make([][2]string, len(e.Headers))
	for i, h := range e.Headers {
		headers[i] = [2]string{h.Key, string(h.Value)}
	}
	m := map[string]any{
		"position": e.Position(), "partition": e.Partition, "offset": e.Offset, "timestamp": e.Timestamp,
		"key": string(e.Key), "event_id": e.EventID, "type": e.Type, "consumer": e.Consumer, "class": e.Class,
		"message": e.Message, "attempts": e.Attempts, "first_failed_at": e.FirstFailedAt, "last_failed_at": e.LastFailedAt,
		"original_topic": e.OriginalTopic, "original_partition": e.OriginalPartition, "original_offset": e.OriginalOffset,
		"replay_source": e.ReplaySource, "headers": headers,
	}
	if withPayload {
		m["payload"] = string(e.Value)
	}
	return m
}

type dlqShowCmd struct {
	dlqTopicFlags
	Position string `arg:"" optional:"" help:"Record position: <partition>:<offset> (as printed by list)."`
	EventID  string `name:"event-id" help:"Show the records of this event ID instead."`
	JSON     bool   `name:"json" help:"Print JSON."`
}

func (c *dlqShowCmd) Run(env *runEnv) error {
	es, err := selectOne(env, c.dlqTopicFlags, c.Position, c.EventID)
	if err != nil {
		return err
	}
	for _, e := range es {
		if c.JSON {
			if err := json.NewEncoder(os.Stdout).Encode(entryJSON(e, true)); err != nil {
				return err
			}
			continue
		}
		printEntry(os.Stdout, e, time.Now())
	}
	return nil
}

// selectOne finds records by position or event ID.
func selectOne(env *runEnv, t dlqTopicFlags, position, eventID string) ([]dlq.Entry, error) {
	if (position == "") == (eventID == "") {
		return nil, errors.New("give a position <partition>:<offset> or --event-id")
	}
	all, err := t.read(env)
	if err != nil {
		return nil, err
	}
	var out []dlq.Entry
	if eventID != "" {
		out = dlq.Select(all, dlq.Filter{EventID: eventID}, time.Now())
	} else {
		_, p, o, ok := dlq.ParsePosition(position)
		if !ok {
			return nil, fmt.Errorf("position %q: want <partition>:<offset>", position)
		}
		for _, e := range all {
			if e.Partition == p && e.Offset == o {
				out = append(out, e)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no such record in %s", t.Topic)
	}
	return out, nil
}

func printEntry(w io.Writer, e dlq.Entry, now time.Time) {
	fmt.Fprintf(w, "position:   %s (dead-lettered %s ago, at %s)\n", e.Position(), age(now, e.Timestamp), e.Timestamp.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "event:      %s %s, key %s\n", e.Type, e.EventID, e.Key)
	fmt.Fprintf(w, "from:       %s[%d]@%d\n", e.OriginalTopic, e.OriginalPartition, e.OriginalOffset)
	fmt.Fprintf(w, "consumer:   %s\nclass:      %s\nattempts:   %d (first failed %s, last %s)\nerror:      %s\n",
		e.Consumer, e.Class, e.Attempts, e.FirstFailedAt.Format(time.RFC3339Nano), e.LastFailedAt.Format(time.RFC3339Nano), e.Message)
	if e.ReplaySource != "" {
		fmt.Fprintf(w, "replay of:  %s\n", e.ReplaySource)
	}
	fmt.Fprintln(w, "headers:")
	for _, h := range e.Headers {
		fmt.Fprintf(w, "  %s: %s\n", h.Key, h.Value)
	}
	fmt.Fprintln(w, "payload:")
	var pretty bytes.Buffer
	if json.Indent(&pretty, e.Value, "  ", "  ") == nil {
		fmt.Fprintf(w, "  %s\n", pretty.String())
	} else {
		fmt.Fprintf(w, "  %q\n", e.Value)
	}
}

type dlqReplayCmd struct {
	dlqTopicFlags
	dlqFilterFlags
	Position string `arg:"" optional:"" help:"Replay only the record at <partition>:<offset>."`
	All      bool   `name:"all" help:"Replay every record that matches (required when no position or filter is given)."`
	DryRun   bool   `name:"dry-run" help:"Print what would be replayed and publish nothing."`
}

func (c *dlqReplayCmd) Run(env *runEnv) error {
	f := c.filter()
	if c.Position == "" && f.IsZero() && !c.All {
		return errors.New("say what to replay: a position <partition>:<offset>, filters (e.g. --event-id), or --all")
	}
	all, err := c.read(env)
	if err != nil {
		return err
	}
	now := time.Now()
	es := dlq.Select(all, f, now)
	if c.Position != "" {
		_, p, o, ok := dlq.ParsePosition(c.Position)
		if !ok {
			return fmt.Errorf("position %q: want <partition>:<offset>", c.Position)
		}
		es = slices.DeleteFunc(es, func(e dlq.Entry) bool { return e.Partition != p || e.Offset != o })
	}
	selected := len(es)
	es = dlq.Dedupe(es)
	if len(es) == 0 {
		return fmt.Errorf("no record in %s matches", c.Topic)
	}
	fmt.Fprintf(os.Stderr, "%d records match, %d distinct events to replay\n", selected, len(es))
	if c.DryRun {
		printList(os.Stdout, c.Topic, len(all), es, 0, now)
		return nil
	}
	p, err := dlq.NewProducer(c.KafkaBrokers)
	if err != nil {
		return err
	}
	defer p.Close()
	var tick func()
	if len(es) > 1 {
		bar := progressbar.NewOptions(len(es), progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription("replaying"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		tick = func() { _ = bar.Add(1) }
		defer func() { _ = bar.Finish() }()
	}
	n, err := dlq.Replay(env.ctx, p, es, now, tick)
	for _, e := range es {
		env.logger.Info("replayed", "event_id", e.EventID, "order_id", string(e.Key), "dlq_position", e.Position(), "topic", e.OriginalTopic)
	}
	fmt.Printf("replayed %d of %d records\n", n, len(es))
	return err
}

type dlqPurgeCmd struct {
	dlqTopicFlags
	DatabaseURL string        `name:"database-url" log:"url" help:"PostgreSQL connection URL: each purged record is recorded in dlq_purged before it is deleted." default:"${database_url}"`
	OlderThan   time.Duration `name:"older-than" help:"Delete only records older than this (per partition, up to its first newer record)."`
	Yes         bool          `name:"yes" help:"Really delete (without it, only print what would be deleted)."`
}

func (c *dlqPurgeCmd) Run(env *runEnv) error {
	r, err := dlq.NewReader(c.KafkaBrokers)
	if err != nil {
		return err
	}
	defer r.Close()
	plans, err := dlq.PlanPurge(r, c.Topic, c.OlderThan, time.Now())
	if err != nil && !errors.Is(err, dlq.ErrNoTopic) {
		return err
	}
	var total int64
	for _, pl := range plans {
		total += pl.To - pl.Low
		fmt.Printf("partition %d: offsets %d..%d (%d records)\n", pl.Partition, pl.Low, pl.To-1, pl.To-pl.Low)
	}
	if total == 0 {
		fmt.Printf("%s: nothing to purge\n", c.Topic)
		return nil
	}
	if !c.Yes {
		return fmt.Errorf("would delete %d records from %s: re-run with --yes", total, c.Topic)
	}
	if err := c.recordPurge(env, r, plans, total); err != nil {
		return err
	}
	// Derived from the reader, so it shares its configuration (kafkaconf's
	// --kafka-* TLS and SASL settings among them).
	a, err := kafka.NewAdminClientFromConsumer(r)
	if err != nil {
		return fmt.Errorf("creating kafka admin client: %w", err)
	}
	defer a.Close()
	if err := dlq.Purge(env.ctx, a, c.Topic, plans); err != nil {
		return err
	}
	fmt.Printf("purged %d records from %s\n", total, c.Topic)
	env.logger.Info("dlq purged", "dlq_topic", c.Topic, "records", total)
	return nil
}
