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
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

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
	kafkaFlags
}

// dlqFilterFlags select records.
type dlqFilterFlags struct {
	Consumer  string        `name:"consumer" help:"Only records dead-lettered by this consumer (${consumer_names_in_words})." enum:",${consumer_names}" default:""`
	Class     string        `name:"class" help:"Only this error class (${error_classes_in_words})." enum:",${error_classes}" default:""`
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

// Validate refuses a command line that names neither a position nor an
// event ID, or both, and a position that does not parse (usage errors).
func (c *dlqShowCmd) Validate() error {
	if (c.Position == "") == (c.EventID == "") {
		return errors.New("give a position <partition>:<offset> or --event-id")
	}
	if _, _, _, ok := dlq.ParsePosition(c.Position); c.Position != "" && !ok {
		return fmt.Errorf("position %q: want <partition>:<offset>", c.Position)
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
