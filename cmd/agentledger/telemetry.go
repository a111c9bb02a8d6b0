package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/agentledger/agentledger/instrument"
)

// exportConfig is what the standard OpenTelemetry variables ask of the
// span export. The OTLP exporters read the rest themselves
// (OTEL_EXPORTER_OTLP_ENDPOINT, _HEADERS, _TIMEOUT, _CERTIFICATE, ...),
// the batch span processor OTEL_BSP_*, the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES.
type exportConfig struct {
	// exporter is OTEL_TRACES_EXPORTER: otlp (default) or none.
	exporter string
	// protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
	// OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (the default, as the
	// specification says) or grpc.
	protocol string
	// shutdown bounds the export of what is left at exit
	// (AGENTLEDGER_SHUTDOWN_TIMEOUT, default 5s).
	shutdown time.Duration
	// flush bounds the export before each result
	// (AGENTLEDGER_FLUSH_TIMEOUT, default 2s): the adapters'
	// WithFlushTimeout, negative for none.
	flush time.Duration
}

// defaultShutdown is how long the last spans may take to export at exit.
const defaultShutdown = 5 * time.Second

func readExportConfig(env environ) (exportConfig, error) {
	c := exportConfig{exporter: "otlp", protocol: "http/protobuf", shutdown: defaultShutdown}
	if v, ok := env("OTEL_TRACES_EXPORTER"); ok && v != "" {
		c.exporter = strings.TrimSpace(v)
	}
	if c.exporter != "otlp" && c.exporter != "none" {
		return c, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: agentledger exports with otlp or none", c.exporter)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v, ok := env(k); ok && v != "" {
			c.protocol = strings.TrimSpace(v)
			if c.protocol != "grpc" && c.protocol != "http/protobuf" {
				return c, fmt.Errorf("%s=%q: agentledger exports OTLP over grpc or http/protobuf", k, v)
			}
			break
		}
	}
	if v, ok := env("AGENTLEDGER_SHUTDOWN_TIMEOUT"); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("AGENTLEDGER_SHUTDOWN_TIMEOUT=%q: want a positive duration such as 5s", v)
		}
		c.shutdown = d
	}
	d, err := readFlushTimeout(env)
	if err != nil {
		return c, err
	}
	c.flush = d
	return c, nil
}

// newPipeline returns the TracerProvider a drop-in records with: the
// ledger's SpanProcessor over a batch processor exporting as c says,
// service.name service unless OTEL_SERVICE_NAME says otherwise. Export
// errors go to errs, prefixed "agentledger: ".
func newPipeline(ctx context.Context, c exportConfig, service string, errs io.Writer) (*sdktrace.TracerProvider, error) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		fmt.Fprintf(errs, "agentledger: %v\n", err)
	}))
	var next sdktrace.SpanProcessor
	if c.exporter == "otlp" {
		var exp sdktrace.SpanExporter
		var err error
		if c.protocol == "grpc" {
			exp, err = otlptracegrpc.New(ctx)
		} else {
			exp, err = otlptracehttp.New(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("OTLP exporter (%s): %w", c.protocol, err)
		}
		// A wake span is flushed at once by the adapter
		// (instrument.WithWakeFlush, bounded by c.flush).
		next = sdktrace.NewBatchSpanProcessor(exp)
	}
	// Later detectors win: OTEL_SERVICE_NAME over the default name.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithSpanProcessor(instrument.NewSpanProcessor(next)),
		// A span the sampler drops inside an invocation is declared, so
		// that nothing says final without it.
		sdktrace.WithSampler(instrument.Sampler(sdktrace.ParentBased(sdktrace.AlwaysSample()))),
		sdktrace.WithResource(res),
	}
	return sdktrace.NewTracerProvider(opts...), nil
}

// shutdownPipeline exports what is left, for at most c.shutdown.
func shutdownPipeline(tp *sdktrace.TracerProvider, c exportConfig, errs io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), c.shutdown)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		fmt.Fprintf(errs, "agentledger: exporting the last spans: %v\n", err)
	}
}

// osEnviron is the process's environment.
var osEnviron environ = os.LookupEnv
