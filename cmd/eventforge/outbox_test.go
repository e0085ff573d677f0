package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestReplayEnded(t *testing.T) {
	refused := errors.New("publishing: broker refused")
	tests := []struct {
		name     string
		missing  []string
		err      error
		wantErr  string
		warnings int
	}{
		{"all found", nil, nil, "", 0},
		{"some missing", []string{"e1", "e2"}, nil, "2 event IDs not found in the outbox", 2},
		{"replay failed", []string{"e1"}, refused, refused.Error(), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			env := &runEnv{ctx: context.Background(), logger: slog.New(slog.NewJSONHandler(&logs, nil))}
			err := replayEnded(env, "events", "the outbox", " (pruned by retention, or never written)", 3, 5, tt.missing, tt.err)
			if got := errString(err); got != tt.wantErr {
				t.Errorf("error %q, want %q", got, tt.wantErr)
			}
			if tt.err != nil && !errors.Is(err, tt.err) {
				t.Errorf("error %v does not wrap the replay's error", err)
			}
			warn := `"msg":"event not in the outbox (pruned by retention, or never written)"`
			if n := strings.Count(logs.String(), warn); n != tt.warnings {
				t.Errorf("%d warnings %s, want %d; logs:\n%s", n, warn, tt.warnings, logs.String())
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
