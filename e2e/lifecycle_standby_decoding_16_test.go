//go:build lifecycle

package e2e

import "testing"

// TestLifecycleDecodeFromStandby16 (`make test-lifecycle`): the runbook
// "Decoding on a standby" on PostgreSQL 16, the first version that decodes
// on a standby, as TestLifecycleDecodeFromStandby17 does on 17.
func TestLifecycleDecodeFromStandby16(t *testing.T) { decodeFromStandby(t, 16) }
