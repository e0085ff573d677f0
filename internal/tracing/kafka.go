package tracing

import (
	"context"
	"strconv"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventforge/eventforge/contract"
)

// AttrOrderID and AttrEventType are EventForge's span attributes; the event
// ID is messaging.message.id.
const (
	AttrOrderID   = attribute.Key("eventforge.order_id")
	AttrEventType = attribute.Key("eventforge.event_type")
)

// HeaderCarrier adapts Kafka record headers to a propagation.TextMapCarrier.
// Set replaces every header with the key, so a record never carries two
// traceparent headers.
type HeaderCarrier struct{ Headers *[]kafka.Header }

// Get returns the value of the last header named key, or "".
func (c HeaderCarrier) Get(key string) string {
	hs := *c.Headers
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return string(hs[i].Value)
		}
	}
	return ""
}

// Set replaces the headers named key by one with value. It builds a new
// slice (one allocation) and never writes to the caller's backing array,
// which may be shared.
func (c HeaderCarrier) Set(key, value string) {
	kept := make([]kafka.Header, 0, len(*c.Headers)+1)
	for _, h := range *c.Headers {
		if h.Key != key {
			kept = append(kept, h)
		}
	}
	*c.Headers = append(kept, kafka.Header{Key: key, Value: []byte(value)})
}

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(*c.Headers))
	for _, h := range *c.Headers {
		keys = append(keys, h.Key)
	}
	return keys
}

// StartPublish starts the producer span of msg as a child of the trace
// context in msg's headers (the traceparent the api stored in
// outbox.headers) and replaces that context in the headers by the span's,
// so consumers continue from the publish span: same trace ID, new parent.
// msg.Opaque is wrapped to carry the span; EndPublish, called with the
// opaque of the delivery report, ends it and returns the original opaque.
// A record without a traceparent starts a new trace.
func StartPublish(ctx context.Context, msg *kafka.Message) {
	carrier := HeaderCarrier{&msg.Headers}
	parent := Propagator().Extract(ctx, carrier)
	topic := topicOf(msg.TopicPartition)
	_, span := Tracer().Start(parent, topic+" publish", trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() { // attributes cost allocations; nobody sees those of a span that records nothing
		span.SetAttributes(append(recordAttrs(msg), semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("publish"))...)
	}
	Propagator().Inject(trace.ContextWithSpan(ctx, span), carrier)
	msg.Opaque = &published{opaque: msg.Opaque, span: span}
}

// published is a record's opaque while its publish span is open.
type published struct {
	opaque any
	span   trace.Span
}

// EndPublish ends the publish span carried by opaque (see StartPublish),
// recording err as its status, and returns the caller's original opaque.
// An opaque without a span is returned as is.
func EndPublish(opaque any, err error) any {
	p, ok := opaque.(*published)
	if !ok {
		return opaque
	}
	if err != nil {
		p.span.RecordError(err)
		p.span.SetStatus(codes.Error, "delivery failed")
	}
	p.span.End()
	return p.opaque
}

// StartProcess starts the consumer span of one record as a child of the
// trace context in its headers. consumer is the consumer's name. The
// returned context holds the span: log with it to get the trace ID on the
// line. End the span with EndSpan.
func StartProcess(ctx context.Context, consumer string, m *kafka.Message) (context.Context, trace.Span) {
	parent := Propagator().Extract(ctx, HeaderCarrier{&m.Headers})
	ctx, span := Tracer().Start(parent, topicOf(m.TopicPartition)+" process", trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		attrs := append(recordAttrs(m), semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"),
			semconv.MessagingConsumerGroupName("eventforge-"+consumer))
		if m.TopicPartition.Offset >= 0 {
			attrs = append(attrs, semconv.MessagingKafkaOffset(int(m.TopicPartition.Offset)))
		}
		span.SetAttributes(attrs...)
	}
	return ctx, span
}

// StartProcessBatch starts the consumer span of each record of a batch
// (see StartProcess) and returns a function that ends them all, recording
// err, if not nil, on each.
func StartProcessBatch(ctx context.Context, consumer string, batch []*kafka.Message) (end func(err error)) {
	spans := make([]trace.Span, len(batch))
	for i, m := range batch {
		_, spans[i] = StartProcess(ctx, consumer, m)
	}
	return func(err error) {
		for _, s := range spans {
			EndSpan(s, err)
		}
	}
}

// EndSpan ends span, recording err, if not nil, as its error status.
func EndSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func recordAttrs(m *kafka.Message) []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.MessagingSystemKafka, semconv.MessagingDestinationName(topicOf(m.TopicPartition))}
	if m.TopicPartition.Partition >= 0 {
		attrs = append(attrs, semconv.MessagingDestinationPartitionID(strconv.Itoa(int(m.TopicPartition.Partition))))
	}
	if len(m.Key) > 0 {
		attrs = append(attrs, semconv.MessagingKafkaMessageKey(string(m.Key)), AttrOrderID.String(string(m.Key)))
	}
	for _, h := range m.Headers {
		switch h.Key {
		case contract.HeaderID:
			attrs = append(attrs, semconv.MessagingMessageID(string(h.Value)))
		case contract.HeaderType:
			attrs = append(attrs, AttrEventType.String(string(h.Value)))
		}
	}
	return attrs
}

func topicOf(tp kafka.TopicPartition) string {
	if tp.Topic == nil {
		return ""
	}
	return *tp.Topic
}
