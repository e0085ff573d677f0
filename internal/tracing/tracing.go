// Package tracing sets up OpenTelemetry tracing for EventForge's processes:
// one tracer provider per process, the W3C Trace Context propagator, an
// OTLP/gRPC exporter that is off unless an endpoint is configured, and slog
// lines that carry the trace and span IDs of the context they are logged
// with.
//
// One order yields one trace: the api's span for the call, whose traceparent
// the api stores in outbox.headers; the cdc's publish span, continued from
// that stored traceparent and injected into the Kafka record's headers; and
// each consumer's process span, continued from the record's headers.
//
// Spans are always created and sampled by the configured ratio, exporter or
// not, so that trace IDs propagate and appear in logs even when nothing is
// exported; without an exporter they record nothing (idOnlyProvider). Order and event IDs go on spans as attributes (they link traces)
// and never on metric labels.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names EventForge's own tracer.
const InstrumentationName = "github.com/eventforge/eventforge"

// ServicePrefix prefixes the service.name resource attribute:
// "eventforge-api", "eventforge-cdc", "eventforge-consumer".
const ServicePrefix = "eventforge-"

// Config configures tracing. Every command embeds it, so the flags are
// global: --otlp-endpoint and --trace-sample-ratio (env EVENTFORGE_OTLP_ENDPOINT
// and EVENTFORGE_TRACE_SAMPLE_RATIO).
type Config struct {
	// OTLPEndpoint is the OTLP/gRPC collector URL; empty turns the exporter
	// off. The scheme chooses the transport: http is plaintext, https is TLS.
	OTLPEndpoint string `name:"otlp-endpoint" help:"Export spans with OTLP/gRPC to this collector URL, e.g. http://otel-collector:4317 (http: plaintext, https: TLS). Empty: no export; trace IDs still propagate and appear in logs."`
	// SampleRatio is the share of new traces that are sampled; a call that
	// arrives with a traceparent keeps its parent's decision.
	SampleRatio float64 `name:"trace-sample-ratio" help:"Share of new traces sampled, 0 to 1; calls that carry a traceparent keep their parent's decision." default:"1"`
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.OTLPEndpoint != "" {
		u, err := url.Parse(c.OTLPEndpoint)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("otlp-endpoint: %w", err))
		case u.Scheme != "http" && u.Scheme != "https":
			errs = append(errs, fmt.Errorf("otlp-endpoint %q: scheme must be http or https", c.OTLPEndpoint))
		case u.Host == "":
			errs = append(errs, fmt.Errorf("otlp-endpoint %q: no host", c.OTLPEndpoint))
		}
	}
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		errs = append(errs, fmt.Errorf("trace-sample-ratio %v: must be between 0 and 1", c.SampleRatio))
	}
	return errors.Join(errs...)
}

// Setup installs the process-wide tracer provider for component (api, cdc,
// consumer, dev, …) and the W3C Trace Context + Baggage propagator. With an
// OTLP endpoint, spans are batched and exported; the exporter connects
// lazily, so an unreachable collector never stops the process (spans are
// dropped and the OpenTelemetry error handler logs it). The returned
// shutdown flushes and stops the exporter; call it once, at exit.
func Setup(ctx context.Context, cfg Config, component string, logger *slog.Logger) (shutdown func(context.Context) error, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid tracing config: %w", err)
	}
	if cfg.OTLPEndpoint == "" {
		Install(newIDOnlyProvider(cfg.SampleRatio), logger)
		logger.Debug("tracing ready", "exporting", false, "trace_sample_ratio", cfg.SampleRatio)
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(cfg.OTLPEndpoint))
	if err != nil {
		return nil, fmt.Errorf("creating otlp exporter for %s: %w", cfg.OTLPEndpoint, err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(newResource(component)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
		sdktrace.WithBatcher(exp),
	)
	Install(tp, logger)
	logger.Info("tracing ready", "otlp_endpoint", cfg.OTLPEndpoint, "exporting", true, "trace_sample_ratio", cfg.SampleRatio)
	return tp.Shutdown, nil
}

// Install makes tp the global tracer provider, sets the W3C propagator and
// routes OpenTelemetry's internal errors (e.g. a failed export) to logger.
// Setup calls it; tests call it with a provider over an in-memory exporter.
func Install(tp trace.TracerProvider, logger *slog.Logger) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator())
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("opentelemetry", "err", err)
	}))
}

// Propagator is the W3C Trace Context (traceparent, tracestate) and Baggage
// propagator every EventForge process uses.
func Propagator() propagation.TextMapPropagator { return propagator }

var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Tracer returns EventForge's tracer from the global provider.
func Tracer() trace.Tracer {
	return otel.Tracer(InstrumentationName)
}

func newResource(component string) *resource.Resource {
	attrs := []resource.Option{
		resource.WithAttributes(semconv.ServiceName(ServicePrefix + component)),
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME win
		resource.WithTelemetrySDK(),
	}
	if host, err := os.Hostname(); err == nil {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceInstanceID(host)))
	}
	r, err := resource.New(context.Background(), attrs...)
	if err != nil {
		// Only a malformed OTEL_RESOURCE_ATTRIBUTES gets here; keep the name.
		return resource.NewSchemaless(semconv.ServiceName(ServicePrefix + component))
	}
	return r
}
