// Package tlsconf loads the TLS configuration of EventForge's servers
// (--tls-cert-file, --tls-key-file) and the credentials a server uses to call
// itself over loopback (the api's REST gateway calling its gRPC server).
package tlsconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Server loads a PEM certificate chain and key. With both paths empty it
// returns nils: the server stays plaintext. self is a client configuration
// that accepts exactly this certificate (pinned), for the server's calls to
// its own listener, where host names cannot be verified. The server
// configuration offers HTTP/1.1 by ALPN (gRPC credentials add h2 to their
// own copy), so a TLS listener serves net/http without HTTP/2 setup.
func Server(certFile, keyFile string) (server, self *tls.Config, err error) {
	if certFile == "" && keyFile == "" {
		return nil, nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, nil, errors.New("tls-cert-file and tls-key-file go together")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("loading tls certificate %s: %w", certFile, err)
	}
	leaf := cert.Certificate[0]
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	self = &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is checked below against the pinned certificate instead
		// of a host name: the server dials its own loopback address.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], leaf) {
				return errors.New("the server's certificate is not the one it was started with")
			}
			return nil
		},
	}
	return server, self, nil
}

// ServerCredentials are gRPC server credentials for cfg; plaintext for nil.
func ServerCredentials(cfg *tls.Config) credentials.TransportCredentials {
	if cfg == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(cfg)
}

// ClientCredentials are gRPC client credentials for cfg; plaintext for nil.
func ClientCredentials(cfg *tls.Config) credentials.TransportCredentials {
	if cfg == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(cfg)
}
