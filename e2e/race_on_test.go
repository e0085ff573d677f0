//go:build race

package e2e

// raceEnabled: this test binary runs with the race detector, so the
// eventforge binary under test is built with it too.
const raceEnabled = true
