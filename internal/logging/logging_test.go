package logging

import "testing"

func TestMaskURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://eventforge:secret@127.0.0.1:54329/eventforge?sslmode=disable", "postgres://eventforge:xxxxx@127.0.0.1:54329/eventforge?sslmode=disable"},
		{"postgres://u@h/db?password=secret", "postgres://u@h/db?password=xxxxx"},
		{"host=h user=u password=secret", "(masked)"},
		{"127.0.0.1:19092", "127.0.0.1:19092"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := MaskURL(tt.in); got != tt.want {
				t.Fatalf("MaskURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
