package slot

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

func TestParseRow(t *testing.T) {
	for _, tc := range []struct {
		name, raw    string
		invalidation string
		failover     *bool
	}{
		{"15", `{"slot_name":"s","plugin":"pgoutput","database":"d","confirmed_flush_lsn":"0/16B3748","active_pid":null,"wal_status":"reserved"}`, "", nil},
		{"16 conflicting", `{"plugin":"pgoutput","database":"d","confirmed_flush_lsn":"0/16B3748","wal_status":"reserved","conflicting":true}`, "conflict", nil},
		{"17 invalidated", `{"plugin":"pgoutput","database":"d","confirmed_flush_lsn":"0/16B3748","wal_status":"lost","conflicting":false,"invalidation_reason":"wal_removed","failover":true}`, "wal_removed", ptr(true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := parseRow([]byte(tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			if !st.Exists || st.Plugin != "pgoutput" || st.Database != "d" || st.Confirmed != pglogrepl.LSN(0x16B3748) {
				t.Fatalf("parsed %+v", st)
			}
			if st.Invalidation != tc.invalidation {
				t.Fatalf("invalidation %q, want %q", st.Invalidation, tc.invalidation)
			}
			if (st.Failover == nil) != (tc.failover == nil) || (st.Failover != nil && *st.Failover != *tc.failover) {
				t.Fatalf("failover %v, want %v", st.Failover, tc.failover)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
