// Package local holds the configuration of the local real-services stack
// (Apache Kafka class path and broker settings, PostgreSQL settings) and
// embeds it so a built binary can start the stack without a checkout.
package local

import "embed"

// Files holds pom.xml, server.properties, log4j2.xml, postgresql.conf and
// pg_hba.conf. server.properties and postgresql.conf are Go text/template
// sources; the others are used verbatim.
//
//go:embed pom.xml server.properties cluster-server.properties log4j2.xml postgresql.conf pg_hba.conf
var Files embed.FS
