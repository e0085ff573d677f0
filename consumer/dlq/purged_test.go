package dlq
