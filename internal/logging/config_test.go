package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

type Inner struct {
	Brokers string `name:"kafka-brokers"`
}

type sample struct {
	Inner       `embed:""`
	DatabaseURL string            `name:"database-url" log:"url"`
	Token       string            `name:"ops-token" log:"secret"`
	Unset       string            `name:"page-token-key" log:"secret"`
	Wait        time.Duration     `name:"status-interval"`
	Topics      map[string]string `name:"topic"`
	Internal    string            `kong:"-"`
	NoFlag      int
}

func (s sample) LogValue() slog.Value { return ConfigValue(s) }

func TestConfigValue(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	cfg := sample{
		Inner:       Inner{Brokers: "127.0.0.1:9092"},
		DatabaseURL: "postgres://eventforge:s3cret@127.0.0.1:5432/eventforge",
		Token:       "t0ken-s3cret",
		Wait:        time.Second,
		Topics:      map[string]string{"order": "eventforge.orders"},
		Internal:    "internal-s3cret",
		NoFlag:      7,
	}
	// An empty key inlines the group: the flags are keys of the line.
	logger.Info("starting", slog.Any("", cfg))
	if strings.Contains(buf.String(), "s3cret") {
		t.Fatalf("a secret reached the log: %s", buf.String())
	}
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"kafka_brokers":   "127.0.0.1:9092",
		"database_url":    "postgres://eventforge:xxxxx@127.0.0.1:5432/eventforge",
		"ops_token":       "xxxxx",
		"page_token_key":  "",
		"status_interval": float64(time.Second),
		"topic":           map[string]any{"order": "eventforge.orders"},
	}
	for k, w := range want {
		if g, ok := line[k]; !ok || !jsonEqual(g, w) {
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
	for _, k := range []string{"Internal", "internal", "NoFlag", "no_flag"} {
		if _, ok := line[k]; ok {
			t.Errorf("%s has no flag but is logged", k)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
