// Package testkit holds the helpers EventForge's tests share that need no
// PostgreSQL or Kafka: free loopback addresses, a self-signed certificate,
// running the eventforge binary to completion, and the metrics table of
// docs/metrics.md. It is imported from
// _test.go files (and the test harness packages) only; depguard enforces it.
// The stack itself is package testenv.
package testkit

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/freeport"
)

// StackDir makes a new directory for a local stack's state under /var/tmp
// (prefix starts its name), mode 0755: t.TempDir is 0700 under a 0700
// parent, which the postgres user cannot traverse. The caller removes it.
func StackDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// FreeAddr returns a free loopback address that no other FreeAddr or
// FreePorts call of the test binary returned (package freeport).
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// FreePorts returns n distinct free loopback ports that no other call of
// the test binary returned (package freeport).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := freeport.Ports(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// Cert is a self-signed certificate written as PEM files.
type Cert struct {
	CertFile, KeyFile string
	// Pool trusts the certificate.
	Pool *x509.CertPool
}

// SelfSignedCert writes a self-signed ECDSA certificate for 127.0.0.1 with
// the common name name, valid for an hour either side of now, to
// dir/<name>.crt and its PKCS #8 key to dir/<name>.key. It serves TLS
// (server authentication) and, being a CA, also verifies itself where a CA
// file is expected.
func SelfSignedCert(t testing.TB, dir, name string) Cert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		IsCA:        true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := Cert{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key"), Pool: x509.NewCertPool()}
	if err := os.WriteFile(c.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	c.Pool.AddCert(cert)
	return c
}

// Result is how a run of the binary ended.
type Result struct {
	Stdout, Stderr string
	// Combined is stdout and stderr interleaved as they were written.
	Combined string
	// Code is the exit code.
	Code int
}

// RunTimeout bounds one Run: longer than any --wait a test gives a command,
// so that only a hung command reaches it.
const RunTimeout = 10 * time.Minute

// Run runs binary with args to completion (at most RunTimeout) and returns
// its output and exit code; the test fails if it cannot be run at all.
func Run(t testing.TB, binary string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), RunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	combined := &Buffer{}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&stdout, combined), io.MultiWriter(&stderr, combined)
	err := cmd.Run()
	res := Result{Stdout: stdout.String(), Stderr: stderr.String(), Combined: combined.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.Code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %s %s: %v", filepath.Base(binary), strings.Join(args, " "), err)
	}
	return res
}

// RunExit is Run that fails the test unless the binary exits with
// wantExit, showing its output.
func RunExit(t testing.TB, wantExit int, binary string, args ...string) Result {
	t.Helper()
	res := Run(t, binary, args...)
	if res.Code != wantExit {
		t.Fatalf("%s %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", filepath.Base(binary), strings.Join(args, " "), res.Code, wantExit, res.Stdout, res.Stderr)
	}
	return res
}

// Buffer is a bytes.Buffer that several goroutines may write to and read
// from, e.g. a logger's output read by the test.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ErrorContains reports whether err is what a test table wants: no error
// when want is empty, else an error whose text contains want.
func ErrorContains(err error, want string) bool {
	if want == "" {
		return err == nil
	}
	return err != nil && strings.Contains(err.Error(), want)
}
