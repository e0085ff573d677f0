// Package logging sets up EventForge's structured logs (log/slog, JSON) and
// masks secrets before configuration is logged.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
)

// New returns a JSON logger at level ("debug", "info", "warn", "error")
// writing to w. Callers add the component name with .With("component", …).
func New(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// MaskURL hides the password of a connection URL (postgres://u:p@h/db →
// postgres://u:xxxxx@h/db). Strings that are not URLs are masked whole if
// they contain a password= keyword.
func MaskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		if strings.Contains(raw, "password=") {
			return "(masked)"
		}
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}
