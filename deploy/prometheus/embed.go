// Package prometheus holds EventForge's Prometheus configuration for the
// compose topology and its alert rules, and embeds them, so that a built
// binary can run a real Prometheus with the shipped rules beside the local
// stack (`eventforge stack monitor`, internal/promserver).
package prometheus

import "embed"

// Files holds prometheus.yml and rules/*.yml.
//
//go:embed prometheus.yml rules/*.yml
var Files embed.FS
