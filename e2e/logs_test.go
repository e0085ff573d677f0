package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
	"time"
)

// logLine is one JSON log line of a component process.
type logLine struct {
	Time   time.Time
	Msg    string
	Fields map[string]any
}

// readLog reads the JSON log lines of path, skipping lines that are not
// JSON (a Go panic, a flag error).
func readLog(t testing.TB, path string) []logLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var fields map[string]any
		if json.Unmarshal(sc.Bytes(), &fields) != nil {
			continue
		}
		l := logLine{Fields: fields}
		l.Msg, _ = fields["msg"].(string)
		if ts, ok := fields["time"].(string); ok {
			l.Time, _ = time.Parse(time.RFC3339Nano, ts)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return lines
}

// logCount counts the JSON log lines of path whose msg is one of msgs.
func logCount(t testing.TB, path string, msgs ...string) int {
	t.Helper()
	n := 0
	for _, l := range readLog(t, path) {
		for _, m := range msgs {
			if l.Msg == m {
				n++
			}
		}
	}
	return n
}

// logTime returns the time of the first JSON log line of path whose msg is
// msg.
func logTime(t testing.TB, path, msg string) time.Time {
	t.Helper()
	for _, l := range readLog(t, path) {
		if l.Msg == msg {
			return l.Time
		}
	}
	t.Fatalf("no %q line in %s", msg, path)
	return time.Time{}
}
