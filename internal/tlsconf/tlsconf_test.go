package tlsconf

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/testkit"
)

func TestServer(t *testing.T) {
	dir := t.TempDir()
	a := testkit.SelfSignedCert(t, dir, "a")
	cert, key := a.CertFile, a.KeyFile
	tests := []struct {
		name, cert, key string
		wantTLS         bool
		wantErr         string
	}{
		{"plaintext", "", "", false, ""},
		{"tls", cert, key, true, ""},
		{"cert without key", cert, "", false, "go together"},
		{"key without cert", "", key, false, "go together"},
		{"missing file", filepath.Join(dir, "none.crt"), key, false, "loading tls certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, self, err := Server(tt.cert, tt.key)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Server() = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (srv != nil) != tt.wantTLS || (self != nil) != tt.wantTLS {
				t.Fatalf("server %v self %v, want TLS %v", srv != nil, self != nil, tt.wantTLS)
			}
			if got := ServerCredentials(srv).Info().SecurityProtocol; (got == "tls") != tt.wantTLS {
				t.Errorf("server credentials %q", got)
			}
			if got := ClientCredentials(self).Info().SecurityProtocol; (got == "tls") != tt.wantTLS {
				t.Errorf("client credentials %q", got)
			}
		})
	}
}

// TestSelfPinsTheServedCertificate: the loopback client accepts the
// server's own certificate and refuses another one.
func TestSelfPinsTheServedCertificate(t *testing.T) {
	dir := t.TempDir()
	a, b := testkit.SelfSignedCert(t, dir, "a"), testkit.SelfSignedCert(t, dir, "b")
	certA, keyA, certB, keyB := a.CertFile, a.KeyFile, b.CertFile, b.KeyFile
	_, selfA, err := Server(certA, keyA)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		cert, key string
		wantOK    bool
	}{
		{"own certificate", certA, keyA, true},
		{"another certificate", certB, keyB, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _, err := Server(tt.cert, tt.key)
			if err != nil {
				t.Fatal(err)
			}
			lis, err := tls.Listen("tcp", "127.0.0.1:0", srv)
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			go func() {
				c, err := lis.Accept()
				if err == nil {
					_ = c.(*tls.Conn).Handshake()
					c.Close()
				}
			}()
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", lis.Addr().String(), selfA)
			if conn != nil {
				conn.Close()
			}
			if (err == nil) != tt.wantOK {
				t.Fatalf("handshake error %v, want success %v", err, tt.wantOK)
			}
		})
	}
}
