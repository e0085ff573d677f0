//go:build !race

package e2e

// raceEnabled: this test binary runs without the race detector, and so does
// the eventforge binary under test.
const raceEnabled = false
