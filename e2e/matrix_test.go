package e2e

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// window is one failure window of the delivery contract and the scenario
// that opens it on real processes and asserts durable state afterwards.
type window struct {
	name string
	run  func(t *testing.T)
}

// failureWindows is the matrix of docs/guarantees.md, in its order.
var failureWindows = []window{
	{"relay crash after the Kafka ack, before the LSN confirm", windowRelayCrashAfterAck},
	{"consumer crash after the DB commit, before the offset commit", windowConsumerCrashAfterCommit},
	{"the same event delivered concurrently to two instances", windowConcurrentDuplicate},
	{"retries exhausted: DLQ acked before the source offset", windowRetriesExhausted},
	{"Kafka broker restart and PostgreSQL restart under load", windowBrokerAndPostgresRestarts},
	{"cdc standby takeover under load", windowStandbyTakeover},
	{"consumer rebalance (1 to 3 to 1 instances) under load", windowRebalance},
	{"api crash before COMMIT", windowAPICrashBeforeCommit},
	{"broker paused with SIGSTOP for 10 s under load", windowBrokerPaused},
	{"three-broker cluster (RF 3, min ISR 2) loses a broker under load", windowClusterBrokerLoss},
}

// matrixRuns is how often each window runs: EVENTFORGE_MATRIX_RUNS,
// default 3.
func matrixRuns(t *testing.T) int {
	n := 3
	if v := os.Getenv("EVENTFORGE_MATRIX_RUNS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("EVENTFORGE_MATRIX_RUNS=%q: want a positive integer", v)
		}
	}
	return n
}

// TestFailureMatrix runs every failure window of the delivery contract
// several times. Each run uses its own database, slot, topic and groups (and
// its own Kafka cluster where brokers are killed or paused), kills or
// pauses real processes, and asserts durable rows, committed offsets, the
// slot position and `eventforge verify`.
func TestFailureMatrix(t *testing.T) {
	runs := matrixRuns(t)
	for _, w := range failureWindows {
		t.Run(w.name, func(t *testing.T) {
			for i := 1; i <= runs; i++ {
				t.Run(fmt.Sprintf("run-%d", i), w.run)
			}
		})
	}
}
