package failpoint

// Every point in EventForge's code. Code evaluates a point only by one of
// these names (Eval(ctx, failpoint.CDCMidTransaction)); tests, drills and
// e2e arm them by the same names. points_test.go checks that each is
// evaluated somewhere in production code and that no Eval uses another name.
// docs/failpoints.md describes them for operators.
const (
	// APIBeforeCommit fires in every order write (create and cancel) after
	// every statement was sent and before the commit: the pipeline's Sync
	// without an idempotency key, COMMIT otherwise.
	APIBeforeCommit = "api.before_commit"
	// CDCAfterAckBeforeConfirm fires when Kafka acknowledged an event and
	// before the acknowledgement can advance the confirmed LSN.
	CDCAfterAckBeforeConfirm = "cdc.after_ack_before_confirm"
	// CDCMidTransaction fires once per transaction with events, after some
	// of its events were produced and before its COMMIT is processed: at the
	// first event produced after an earlier event of the same transaction
	// was acknowledged by Kafka, or else just before the COMMIT.
	CDCMidTransaction = "cdc.mid_transaction"
	// CDCBeforeStartReplication fires when the reader has checked its slot
	// against the checkpoint and before it starts streaming from it: the
	// moment another client can drop and recreate the slot unseen.
	CDCBeforeStartReplication = "cdc.before_start_replication"
	// ConsumerBeforeDBCommit fires after the handler applied the change and
	// before the transaction commits.
	ConsumerBeforeDBCommit = "consumer.before_db_commit"
	// ConsumerAfterDBCommitBeforeOffset fires after the transaction
	// committed and before the Kafka offset is stored.
	ConsumerAfterDBCommitBeforeOffset = "consumer.after_db_commit_before_offset"
	// ConsumerAfterDLQAckBeforeOffset fires after the DLQ acknowledged a
	// dead-letter record and before the source offset is stored.
	ConsumerAfterDLQAckBeforeOffset = "consumer.after_dlq_ack_before_offset"
)

// Points returns the name of every point, in the order above.
func Points() []string {
	return []string{
		APIBeforeCommit,
		CDCAfterAckBeforeConfirm,
		CDCMidTransaction,
		CDCBeforeStartReplication,
		ConsumerBeforeDBCommit,
		ConsumerAfterDBCommitBeforeOffset,
		ConsumerAfterDLQAckBeforeOffset,
	}
}
