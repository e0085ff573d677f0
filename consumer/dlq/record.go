// Package dlq defines EventForge's dead-letter records and the tooling around
// them: building a DLQ record from a failed source record, reading and
// filtering a DLQ topic, replaying entries to their original topic with
// their original key, value and event ID, and purging.
//
// A DLQ record is the source record's key, value and headers, unchanged,
// plus the dlq.* headers below. docs/dlq.md is the operator's runbook.
package dlq

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/contract"
)

// DefaultSuffix is appended to a source topic to name its DLQ topic.
const DefaultSuffix = ".dlq"

// Headers a DLQ record adds to the source record's headers.
const (
	HeaderOriginalTopic     = "dlq.original.topic"
	HeaderOriginalPartition = "dlq.original.partition"
	HeaderOriginalOffset    = "dlq.original.offset"
	HeaderConsumer          = "dlq.consumer"
	HeaderErrorClass        = "dlq.error.class"
	HeaderErrorMessage      = "dlq.error.message"
	HeaderAttempts          = "dlq.attempts"
	HeaderFirstFailedAt     = "dlq.first_failed_at"
	HeaderLastFailedAt      = "dlq.last_failed_at"
)

// Headers a replayed record carries besides the original ones.
const (
	// HeaderReplaySource is "<dlq topic>/<partition>/<offset>" of the DLQ
	// record a replay republished.
	HeaderReplaySource = "dlq.replay.source"
	// HeaderReplayedAt is when the replay published the record (RFC 3339).
	HeaderReplayedAt = "dlq.replay.at"
)

// failureHeaders are the headers Record sets; they are dropped from the
// source's headers first, so a record that fails again after a replay
// carries one set, describing its latest failure.
var failureHeaders = map[string]bool{
	HeaderOriginalTopic: true, HeaderOriginalPartition: true, HeaderOriginalOffset: true,
	HeaderConsumer: true, HeaderErrorClass: true, HeaderErrorMessage: true, HeaderAttempts: true,
	HeaderFirstFailedAt: true, HeaderLastFailedAt: true,
}

// maxMessageLen bounds dlq.error.message.
const maxMessageLen = 2048

// Failure describes why a consumer gave up on a record.
type Failure struct {
	Consumer      string    // consumer name, e.g. "fulfillment"
	Class         string    // error class, e.g. "permanent", "not_found"
	Message       string    // the last error
	Attempts      int       // attempts made
	FirstFailedAt time.Time // first failed attempt
	LastFailedAt  time.Time // last failed attempt
}

// cappedMessageLen bounds dlq.error.message in a copy written again after
// the DLQ topic refused the first as too large (Failure.Capped).
const cappedMessageLen = 200

// Capped returns f with its message cut to 200 bytes: the failure of a
// dead-letter copy that the DLQ topic refused as too large, written again
// with the dlq headers as short as they get. The copy still carries the
// source record's key, value and headers whole; what remains over the
// DLQ topic's max.message.bytes can only be fixed by raising it.
func (f Failure) Capped() Failure {
	f.Message = truncate(f.Message, cappedMessageLen)
	return f
}

// Topic returns the DLQ topic of source with suffix (DefaultSuffix when
// empty).
func Topic(source, suffix string) string {
	if suffix == "" {
		suffix = DefaultSuffix
	}
	return source + suffix
}

// Record builds the DLQ record of src on topic: the same key, value and
// headers (less any earlier dlq failure headers) plus the failure headers.
func Record(src *kafka.Message, topic string, f Failure) *kafka.Message {
	headers := make([]kafka.Header, 0, len(src.Headers)+len(failureHeaders))
	for _, h := range src.Headers {
		if !failureHeaders[h.Key] {
			headers = append(headers, h)
		}
	}
	add := func(k, v string) { headers = append(headers, kafka.Header{Key: k, Value: []byte(v)}) }
	origTopic := ""
	if src.TopicPartition.Topic != nil {
		origTopic = *src.TopicPartition.Topic
	}
	add(HeaderOriginalTopic, origTopic)
	add(HeaderOriginalPartition, strconv.FormatInt(int64(src.TopicPartition.Partition), 10))
	add(HeaderOriginalOffset, strconv.FormatInt(int64(src.TopicPartition.Offset), 10))
	add(HeaderConsumer, f.Consumer)
	add(HeaderErrorClass, f.Class)
	add(HeaderErrorMessage, truncate(f.Message, maxMessageLen))
	add(HeaderAttempts, strconv.Itoa(f.Attempts))
	add(HeaderFirstFailedAt, f.FirstFailedAt.UTC().Format(time.RFC3339Nano))
	add(HeaderLastFailedAt, f.LastFailedAt.UTC().Format(time.RFC3339Nano))
	return &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key:            src.Key,
		Value:          src.Value,
		Headers:        headers,
	}
}

// ReplayRecord builds the record that replays e: to e's original topic, with
// its key, value and original headers (the event ID among them), without
// the failure headers and with the replay headers set.
func ReplayRecord(e Entry, at time.Time) *kafka.Message {
	topic := e.OriginalTopic
	headers := make([]kafka.Header, 0, len(e.Headers)+2)
	for _, h := range e.Headers {
		if !failureHeaders[h.Key] && h.Key != HeaderReplaySource && h.Key != HeaderReplayedAt {
			headers = append(headers, h)
		}
	}
	headers = append(headers,
		kafka.Header{Key: HeaderReplaySource, Value: []byte(e.Position())},
		kafka.Header{Key: HeaderReplayedAt, Value: []byte(at.UTC().Format(time.RFC3339Nano))})
	return &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key:            e.Key,
		Value:          e.Value,
		Headers:        headers,
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) { // do not cut a UTF-8 sequence in half
		s = s[:len(s)-1]
	}
	return s + "…"
}

// Entry is one DLQ record as read back.
type Entry struct {
	Topic     string // the DLQ topic
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Value     []byte
	Headers   []kafka.Header

	EventID           string // header id
	Type              string // header type
	OriginalTopic     string
	OriginalPartition int32
	OriginalOffset    int64
	Consumer          string
	Class             string
	Message           string
	Attempts          int
	FirstFailedAt     time.Time
	LastFailedAt      time.Time
	ReplaySource      string // set when the failed record was itself a replay
}

// Position names the entry as "<topic>/<partition>/<offset>".
func (e Entry) Position() string {
	return e.Topic + "/" + strconv.FormatInt(int64(e.Partition), 10) + "/" + strconv.FormatInt(e.Offset, 10)
}

// Header returns the value of the last header named key.
func (e Entry) Header(key string) string {
	v := ""
	for _, h := range e.Headers {
		if h.Key == key {
			v = string(h.Value)
		}
	}
	return v
}

// Parse reads an Entry from a record of a DLQ topic. Missing or unparsable
// dlq headers leave their fields zero.
func Parse(m *kafka.Message) Entry {
	e := Entry{
		Partition: m.TopicPartition.Partition,
		Offset:    int64(m.TopicPartition.Offset),
		Timestamp: m.Timestamp,
		Key:       m.Key,
		Value:     m.Value,
		Headers:   m.Headers,
	}
	if m.TopicPartition.Topic != nil {
		e.Topic = *m.TopicPartition.Topic
	}
	e.EventID = e.Header(contract.HeaderID)
	e.Type = e.Header(contract.HeaderType)
	e.OriginalTopic = e.Header(HeaderOriginalTopic)
	if p, err := strconv.ParseInt(e.Header(HeaderOriginalPartition), 10, 32); err == nil {
		e.OriginalPartition = int32(p)
	}
	e.OriginalOffset, _ = strconv.ParseInt(e.Header(HeaderOriginalOffset), 10, 64)
	e.Consumer = e.Header(HeaderConsumer)
	e.Class = e.Header(HeaderErrorClass)
	e.Message = e.Header(HeaderErrorMessage)
	e.Attempts, _ = strconv.Atoi(e.Header(HeaderAttempts))
	e.FirstFailedAt, _ = time.Parse(time.RFC3339Nano, e.Header(HeaderFirstFailedAt))
	e.LastFailedAt, _ = time.Parse(time.RFC3339Nano, e.Header(HeaderLastFailedAt))
	e.ReplaySource = e.Header(HeaderReplaySource)
	return e
}

// ParsePosition parses "<partition>:<offset>" or "<topic>/<partition>/<offset>".
func ParsePosition(s string) (topic string, partition int32, offset int64, ok bool) {
	var p, o string
	if i := strings.LastIndex(s, "/"); i >= 0 {
		rest := s[:i]
		j := strings.LastIndex(rest, "/")
		if j < 0 {
			return "", 0, 0, false
		}
		topic, p, o = rest[:j], rest[j+1:], s[i+1:]
	} else {
		var found bool
		p, o, found = strings.Cut(s, ":")
		if !found {
			return "", 0, 0, false
		}
	}
	pi, err1 := strconv.ParseInt(p, 10, 32)
	oi, err2 := strconv.ParseInt(o, 10, 64)
	if err1 != nil || err2 != nil || pi < 0 || oi < 0 {
		return "", 0, 0, false
	}
	return topic, int32(pi), oi, true
}
