package kafkasink

import (
	"strings"
	"time"
	"unicode"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/contract"
)

// Record turns an outbox event into its Kafka record: key = aggregate ID,
// value = payload, header id = event ID (the Debezium outbox convention),
// CloudEvents binary-mode headers, and the event's stored headers (e.g.
// traceparent). docs/events.md is the contract.
func Record(ev *decode.Event, topic string) *kafka.Message {
	headers := make([]kafka.Header, 0, 8+len(ev.Headers))
	add := func(k, v string) { headers = append(headers, kafka.Header{Key: k, Value: []byte(v)}) }
	add(contract.HeaderID, ev.ID)
	add(contract.HeaderType, ev.Type)
	add(contract.HeaderCESpecVersion, contract.CESpecVersion)
	add(contract.HeaderCEID, ev.ID)
	add(contract.HeaderCEType, CloudEventType(ev.AggregateType, ev.Type))
	add(contract.HeaderCESource, "/eventforge/"+ev.AggregateType)
	if t, ok := parsePGTime(ev.CreatedAt); ok {
		add(contract.HeaderCETime, t.UTC().Format(time.RFC3339Nano))
	}
	add(contract.HeaderContentType, contract.ContentTypeJSON)
	for k, v := range ev.Headers {
		add(k, v)
	}
	return &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key:            []byte(ev.AggregateID),
		Value:          ev.Payload,
		Headers:        headers,
	}
}

// CloudEventType derives a CloudEvents type from an outbox event:
// ("order", "OrderCreated") → "eventforge.order.created.v1".
func CloudEventType(aggregateType, eventType string) string {
	rest := eventType
	if len(rest) > len(aggregateType) && strings.EqualFold(rest[:len(aggregateType)], aggregateType) {
		rest = rest[len(aggregateType):]
	}
	var b strings.Builder
	for i, r := range rest {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte('.')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return "eventforge." + strings.ToLower(aggregateType) + "." + b.String() + ".v1"
}

// parsePGTime parses timestamptz in PostgreSQL's default text output.
func parsePGTime(s string) (time.Time, bool) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00", "2006-01-02 15:04:05.999999-07:00:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}
