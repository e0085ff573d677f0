// Package contract names, once, the event contract every EventForge
// component shares: the Kafka record headers, the event and aggregate types,
// and the default names of the topic, replication slot and publication and
// the local PostgreSQL and Kafka addresses. docs/events.md describes the contract in prose;
// this package is its Go form, so `go list -deps` shows every package that
// depends on it.
//
// It sits at the top level beside proto/ rather than inside
// proto/eventforge/v1 because that package is generated code linked with
// gRPC and the REST gateway: the CDC reader and the consumers need these
// names, not those libraries. The package imports nothing; the event types
// equal the names of the payload messages in proto/eventforge/v1/events.proto
// (contract_test.go checks it).
package contract

// Kafka record headers the CDC reader writes on every record
// (cdc/sink/kafkasink.Record) and consumers, verify, the console and the bench read.
const (
	// HeaderID is the outbox event ID, the Debezium outbox convention.
	// Consumers deduplicate on it.
	HeaderID = "id"
	// HeaderType is the outbox event type, e.g. TypeOrderCreated.
	HeaderType = "type"
	// HeaderCESpecVersion and the other ce_ headers are CloudEvents'
	// binary-mode attributes.
	HeaderCESpecVersion = "ce_specversion"
	HeaderCEID          = "ce_id"
	HeaderCEType        = "ce_type"
	HeaderCESource      = "ce_source"
	HeaderCETime        = "ce_time"
	// HeaderContentType is the media type of the record value.
	HeaderContentType = "content-type"
)

// Values of the fixed headers.
const (
	// CESpecVersion is the CloudEvents version of the ce_ headers.
	CESpecVersion = "1.0"
	// ContentTypeJSON is the media type of every payload (protojson).
	ContentTypeJSON = "application/json"
)

// AggregateOrder is the outbox aggregate type of every order event; the
// record key is the order ID.
const AggregateOrder = "order"

// Event types: the outbox row's type column and the record's HeaderType.
const (
	TypeOrderCreated   = "OrderCreated"
	TypeOrderCancelled = "OrderCancelled"
)

// Default names. Each has a flag to override it where a component uses it.
const (
	// Topic is the topic of the order events (aggregate type "order").
	Topic = "eventforge.orders"
	// Slot is the logical replication slot the CDC reader consumes.
	Slot = "eventforge_outbox"
	// Publication is the publication on the outbox table (publish = 'insert').
	Publication = "eventforge_outbox"
	// DatabaseURL is the PostgreSQL URL of the local stack (`eventforge
	// stack up`), the default of every --database-url flag.
	DatabaseURL = "postgres://eventforge:eventforge@127.0.0.1:54329/eventforge?sslmode=disable"
	// KafkaBrokers is the Kafka bootstrap address of the local stack, the
	// default of every --kafka-brokers flag.
	KafkaBrokers = "127.0.0.1:19092"
)
