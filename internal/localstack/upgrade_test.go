package localstack

import (
	"log/slog"
	"testing"
)

func TestControlDataField(t *testing.T) {
	out := "pg_control version number:            1800\nData page checksum version:           1\nMock authentication nonce:            ab:cd\n"
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{
		{"Data page checksum version", "1", true},
		{"Mock authentication nonce", "ab:cd", true},
		{"Data page checksum", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := controlDataField(out, tc.name)
			if got != tc.want || ok != tc.ok {
				t.Errorf("controlDataField(%q) = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestUpgradeRefusesAnOlderTarget(t *testing.T) {
	cfg := Config{StateDir: t.TempDir(), PGVersion: 17, PGPort: 55432, KafkaPort: 55433, KafkaControllerPort: 55434}
	for _, to := range []int{15, 17, 19} {
		if _, err := Upgrade(t.Context(), cfg, UpgradeConfig{To: to}, slog.Default()); err == nil {
			t.Errorf("Upgrade from 17 to %d succeeded", to)
		}
	}
}
