package kafkasink

import (
	"errors"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// permanentCodes are the producer errors about one record that retrying the
// same record can never fix: Kafka refuses the record itself or its topic.
// Everything else — connection losses, leader changes, purges at a session
// end, timeouts — is retriable: the record is republished.
var permanentCodes = map[kafka.ErrorCode]bool{
	kafka.ErrMsgSizeTooLarge:             true, // over the broker's or topic's max.message.bytes, or the producer's message.max.bytes
	kafka.ErrInvalidMsgSize:              true,
	kafka.ErrRecordListTooLarge:          true, // over the topic's segment size
	kafka.ErrInvalidRecord:               true, // the broker's record validation refused it
	kafka.ErrInvalidTimestamp:            true,
	kafka.ErrPolicyViolation:             true,
	kafka.ErrUnsupportedForMessageFormat: true,
	kafka.ErrTopicException:              true, // an invalid topic name
	kafka.ErrTopicAuthorizationFailed:    true,
	kafka.ErrUnknownTopicOrPart:          true, // a routed topic that does not exist
	kafka.ErrUnknownTopic:                true, // the same, found by librdkafka's metadata
	kafka.ErrUnknownPartition:            true,
	kafka.ErrInvalidArg:                  true, // Produce refused the record's fields
	kafka.ErrBadMsg:                      true,
}

// Permanent reports whether err, a delivery report's or Produce's error,
// says that Kafka will never accept this record as it is. A fatal producer
// error is never permanent for a record: it ends the producer, and the
// records are republished by a new one.
func Permanent(err error) bool {
	var kerr kafka.Error
	if !errors.As(err, &kerr) || kerr.IsFatal() {
		return false
	}
	return permanentCodes[kerr.Code()]
}

// ErrorCode describes err's Kafka error code as librdkafka's number and
// text, e.g. "10 Broker: Message size too large", or "unknown" for an error
// that is not a Kafka error.
func ErrorCode(err error) string {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return "unknown"
	}
	return fmt.Sprintf("%d %s", int(kerr.Code()), kerr.Code())
}
