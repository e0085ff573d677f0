package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
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
	Purge  dlqPurgeCmd  `cmd:"" help:"Delete dead-lettered records: those named with --through (what dlq replay replayed), --older-than, or --all."`
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

// scan calls fn with every record held by the DLQ topic (dlq.Scan: one at
// a time); a topic that does not exist holds none.
func (f dlqTopicFlags) scan(env *runEnv, r *kafka.Consumer, fn func(dlq.Entry) error) error {
	err := dlq.Scan(env.ctx, r, f.Topic, fn)
	if errors.Is(err, dlq.ErrNoTopic) {
		return nil // nothing was ever dead-lettered there
	}
	return err
}

type dlqListCmd struct {
	dlqTopicFlags
	dlqFilterFlags
	Limit int  `name:"limit" help:"Print at most this many records (the counts cover all that match; 0 = all)." default:"100"`
	JSON  bool `name:"json" help:"Print one JSON object per record instead of a table."`
}

func (c *dlqListCmd) Run(env *runEnv) error {
	r, err := dlq.NewReader(c.KafkaBrokers)
	if err != nil {
		return err
	}
	defer r.Close()
	now, f := time.Now(), c.filter()
	enc := json.NewEncoder(os.Stdout)
	held, s := 0, dlq.NewSummary()
	var rows []dlq.Entry
	err = c.scan(env, r, func(e dlq.Entry) error {
		held++
		if !f.Match(e, now) {
			return nil
		}
		if c.JSON {
			return enc.Encode(entryJSON(e, false))
		}
		s.Add(e)
		if c.Limit == 0 || len(rows) < c.Limit {
			e.Value = nil // the table shows no payload
			rows = append(rows, e)
		}
		return nil
	})
	if err != nil || c.JSON {
		return err
	}
	printList(os.Stdout, c.Topic, held, s, rows, now)
	return nil
}

// printList prints the summary s of the records that match and the table
// of rows, the first of them.
func printList(w io.Writer, topic string, held int, s dlq.Summary, rows []dlq.Entry, now time.Time) {
	fmt.Fprintf(w, "%s: %d records held, %d match\n", topic, held, s.Total)
	if s.Total == 0 {
		return
	}
	fmt.Fprintf(w, "oldest %s ago, newest %s ago\n", age(now, s.Oldest), age(now, s.Newest))
	fmt.Fprintf(w, "by consumer: %s\nby class:    %s\nby type:     %s\n\n", counts(s.ByConsumer), counts(s.ByClass), counts(s.ByType))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POSITION\tAGE\tCONSUMER\tCLASS\tATTEMPTS\tTYPE\tEVENT ID\tKEY\tERROR")
	for _, e := range rows {
		fmt.Fprintf(tw, "%d:%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.Partition, e.Offset, age(now, e.Timestamp), e.Consumer, e.Class,
			e.Attempts, e.Type, e.EventID, e.Key, oneLine(e.Message, 100))
	}
	if more := s.Total - len(rows); more > 0 {
		fmt.Fprintf(tw, "… %d more (raise --limit)\n", more)
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

// selectOne finds records by position (read at once) or event ID (a
// scan).
func selectOne(env *runEnv, t dlqTopicFlags, position, eventID string) ([]dlq.Entry, error) {
	if (position == "") == (eventID == "") {
		return nil, errors.New("give a position <partition>:<offset> or --event-id")
	}
	r, err := dlq.NewReader(t.KafkaBrokers)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []dlq.Entry
	if eventID != "" {
		f := dlq.Filter{EventID: eventID}
		err = t.scan(env, r, func(e dlq.Entry) error {
			if f.Match(e, time.Time{}) {
				out = append(out, e)
			}
			return nil
		})
	} else {
		_, p, o, ok := dlq.ParsePosition(position)
		if !ok {
			return nil, fmt.Errorf("position %q: want <partition>:<offset>", position)
		}
		var e dlq.Entry
		e, err = dlq.ReadAt(env.ctx, r, t.Topic, p, o)
		if errors.Is(err, dlq.ErrNoRecord) || errors.Is(err, dlq.ErrNoTopic) {
			err = nil
		} else if err == nil {
			out = append(out, e)
		}
	}
	if err != nil {
		return nil, err
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
	Position    string `arg:"" optional:"" help:"Replay only the record at <partition>:<offset>."`
	All         bool   `name:"all" help:"Replay every record that matches (required when no position or filter is given)."`
	DryRun      bool   `name:"dry-run" help:"Print what would be replayed and publish nothing."`
	Purge       bool   `name:"purge" help:"Then purge, per partition, the records from the first held up to the first not replayed (each recorded in dlq_purged first)."`
	DatabaseURL string `name:"database-url" log:"url" help:"PostgreSQL connection URL, for --purge: each purged record is recorded in dlq_purged before it is deleted." default:"${database_url}"`
}

// replayed is what a replay did with the matching entries of one DLQ
// partition: for each, in offset order, the entry that replays its event
// (itself, or the newest entry of the same event).
type replayed struct {
	low     int64 // the partition's first held offset when it was read
	offsets []int64
	by      []dlqPos // by[i] replays offsets[i]
}

// dlqPos is a DLQ entry's partition and offset.
type dlqPos struct {
	partition int32
	offset    int64
}

func (c *dlqReplayCmd) Run(env *runEnv) error {
	match, err := c.matcher()
	if err != nil {
		return err
	}
	r, err := dlq.NewReader(c.KafkaBrokers)
	if err != nil {
		return err
	}
	defer r.Close()
	now := time.Now()
	sel, err := c.selectEntries(env, r, match, now)
	if err != nil {
		return err
	}
	if sel.selected == 0 {
		return fmt.Errorf("no record in %s matches", c.Topic)
	}
	if c.DryRun {
		return c.printReplays(env, r, sel, match, now)
	}
	out, err := c.replay(env, r, sel, match, now)
	fmt.Fprintf(os.Stderr, "%d records match, %d distinct events to replay\n", sel.selected, out.replays)
	fmt.Printf("replayed %d of %d events; %d failed\n", len(out.acked), out.replays, len(out.failed))
	for i, res := range out.failed {
		if i == 20 {
			fmt.Printf("… %d more failures (see the log)\n", len(out.failed)-i)
			break
		}
		fmt.Printf("  not replayed: %d:%d event %s: %v\n", res.Partition, res.Offset, res.EventID, res.Err)
	}
	if err != nil {
		return err
	}
	if err := c.purgeReplayed(env, r, coveredPrefix(sel.parts, out.acked)); err != nil {
		return err
	}
	if len(out.failed) > 0 {
		return fmt.Errorf("%d of %d replays failed", len(out.failed), out.replays)
	}
	return nil
}

// matcher returns what selects an entry: the filters and the position.
func (c *dlqReplayCmd) matcher() (func(dlq.Entry, time.Time) bool, error) {
	f := c.filter()
	if c.Position == "" && f.IsZero() && !c.All {
		return nil, errors.New("say what to replay: a position <partition>:<offset>, filters (e.g. --event-id), or --all")
	}
	if c.Position == "" {
		return f.Match, nil
	}
	_, p, o, ok := dlq.ParsePosition(c.Position)
	if !ok {
		return nil, fmt.Errorf("position %q: want <partition>:<offset>", c.Position)
	}
	return func(e dlq.Entry, now time.Time) bool { return e.Partition == p && e.Offset == o && f.Match(e, now) }, nil
}

// selection is what a first pass over the DLQ found.
type selection struct {
	held, selected int
	newest         dlq.Newest          // which entry replays each selected event
	parts          map[int32]*replayed // filled by the second pass
}

// selectEntries reads the DLQ once: which entry replays each selected
// event.
func (c *dlqReplayCmd) selectEntries(env *runEnv, r *kafka.Consumer, match func(dlq.Entry, time.Time) bool, now time.Time) (*selection, error) {
	sel := &selection{parts: map[int32]*replayed{}}
	err := c.scan(env, r, func(e dlq.Entry) error {
		sel.held++
		if sel.parts[e.Partition] == nil {
			sel.parts[e.Partition] = &replayed{low: e.Offset}
		}
		if match(e, now) {
			sel.selected++
			sel.newest.Add(e)
		}
		return nil
	})
	return sel, err
}

// printReplays prints what a replay would publish.
func (c *dlqReplayCmd) printReplays(env *runEnv, r *kafka.Consumer, sel *selection, match func(dlq.Entry, time.Time) bool, now time.Time) error {
	s := dlq.NewSummary()
	var rows []dlq.Entry
	err := c.scan(env, r, func(e dlq.Entry) error {
		if match(e, now) && sel.newest.Replays(e) {
			s.Add(e)
			e.Value = nil
			rows = append(rows, e)
		}
		return nil
	})
	fmt.Fprintf(os.Stderr, "%d records match, %d distinct events to replay\n", sel.selected, s.Total)
	printList(os.Stdout, c.Topic, sel.held, s, rows, now)
	return err
}

// replayOutcome is what a replay did.
type replayOutcome struct {
	replays int             // entries replayed (one per event)
	acked   map[dlqPos]bool // their positions, once acknowledged
	failed  []dlq.Result
}

// replay reads the DLQ a second time and replays the entry that replays
// each selected event, noting for every selected entry which one that is.
func (c *dlqReplayCmd) replay(env *runEnv, r *kafka.Consumer, sel *selection, match func(dlq.Entry, time.Time) bool, now time.Time) (*replayOutcome, error) {
	var tick func()
	if sel.selected > 1 {
		bar := progressbar.NewOptions(sel.newest.Events(), progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription("replaying"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		tick = func() { _ = bar.Add(1) }
		defer func() { _ = bar.Finish() }()
	}
	p, err := dlq.NewProducer(c.KafkaBrokers)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	out := &replayOutcome{acked: map[dlqPos]bool{}}
	rp := dlq.NewReplayer(p, now, func(res dlq.Result) {
		if tick != nil {
			tick()
		}
		if res.Err != nil {
			out.failed = append(out.failed, res)
			env.logger.Error("replay failed", "event_id", res.EventID, "order_id", string(res.Key), "dlq_position", res.Position(),
				"topic", res.OriginalTopic, "err", res.Err)
			return
		}
		out.acked[dlqPos{res.Partition, res.Offset}] = true
		env.logger.Info("replayed", "event_id", res.EventID, "dlq_position", res.Position(), "topic", res.OriginalTopic)
	})
	err = c.scan(env, r, func(e dlq.Entry) error {
		if !match(e, now) {
			return nil
		}
		if bp, bo, ok := sel.newest.ReplayedBy(e); ok {
			pr := sel.parts[e.Partition]
			pr.offsets = append(pr.offsets, e.Offset)
			pr.by = append(pr.by, dlqPos{bp, bo})
		}
		if !sel.newest.Replays(e) {
			return nil
		}
		out.replays++
		return rp.Add(env.ctx, e)
	})
	if err == nil {
		err = rp.Wait(env.ctx)
	}
	return out, err
}

// purgeReplayed purges what through names (--purge), or prints the
// command that does.
func (c *dlqReplayCmd) purgeReplayed(env *runEnv, r *kafka.Consumer, through map[int32]int64) error {
	if len(through) == 0 {
		return nil
	}
	if !c.Purge {
		args := make([]string, 0, len(through))
		for _, pid := range slices.Sorted(maps.Keys(through)) {
			args = append(args, fmt.Sprintf("--through %d:%d", pid, through[pid]))
		}
		fmt.Printf("purge what was replayed with: eventforge dlq purge --topic %s %s --yes\n", c.Topic, strings.Join(args, " "))
		return nil
	}
	plans, err := dlq.PlanThrough(r, c.Topic, through)
	if err != nil {
		return err
	}
	return purge(env, r, c.Topic, c.DatabaseURL, plans)
}

// coveredPrefix returns, per partition, the last offset of the run of
// entries from its first held offset whose events were replayed (acked):
// Kafka deletes prefixes only, so a purge of what was replayed stops at
// the first entry that was not (not selected, or its replay failed).
func coveredPrefix(parts map[int32]*replayed, acked map[dlqPos]bool) map[int32]int64 {
	out := map[int32]int64{}
	for pid, pr := range parts {
		next := pr.low
		for i, off := range pr.offsets {
			if off != next || !acked[pr.by[i]] {
				break
			}
			next = off + 1
		}
		if next > pr.low {
			out[pid] = next - 1
		}
	}
	return out
}

type dlqPurgeCmd struct {
	dlqTopicFlags
	DatabaseURL string        `name:"database-url" log:"url" help:"PostgreSQL connection URL: each purged record is recorded in dlq_purged before it is deleted." default:"${database_url}"`
	Through     []string      `name:"through" help:"Delete partition P's records up to and including offset O, given as P:O (repeatable; dlq replay prints them for what it replayed)."`
	OlderThan   time.Duration `name:"older-than" help:"Delete only records older than this (per partition, up to its first newer record)."`
	All         bool          `name:"all" help:"Delete every record held now."`
	Yes         bool          `name:"yes" help:"Really delete (without it, only print what would be deleted)."`
}

func (c *dlqPurgeCmd) Run(env *runEnv) error {
	named := 0
	for _, b := range []bool{len(c.Through) > 0, c.OlderThan > 0, c.All} {
		if b {
			named++
		}
	}
	if named != 1 {
		return errors.New("say what to purge, one of: --through P:O (what dlq replay printed), --older-than, --all")
	}
	r, err := dlq.NewReader(c.KafkaBrokers)
	if err != nil {
		return err
	}
	defer r.Close()
	var plans []dlq.PurgePlan
	if len(c.Through) > 0 {
		through := map[int32]int64{}
		for _, arg := range c.Through {
			_, p, o, ok := dlq.ParsePosition(arg)
			if !ok {
				return fmt.Errorf("--through %q: want <partition>:<offset>", arg)
			}
			through[p] = o
		}
		plans, err = dlq.PlanThrough(r, c.Topic, through)
	} else {
		plans, err = dlq.PlanPurge(r, c.Topic, c.OlderThan, time.Now())
	}
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
	return purge(env, r, c.Topic, c.DatabaseURL, plans)
}
