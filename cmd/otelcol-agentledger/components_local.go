//go:build agentledger_local

package main

import (
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/memorylimiterprocessor"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"

	"github.com/open-telemetry/opentelemetry-collector-contrib/connector/signaltometricsconnector"
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/healthcheckextension"
	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/storage/filestorage"
	"github.com/open-telemetry/opentelemetry-collector-contrib/processor/deltatocumulativeprocessor"

	"github.com/agentledger/agentledger/extension/invocationstatusextension"
	"github.com/agentledger/agentledger/processor/invocationprocessor"
)

// components is the local distribution (go build -tags agentledger_local,
// `make build-local` into .bin/otelcol-agentledger-local): only what
// collector-config/local.yaml, jaeger.yaml and view.yaml use, the
// configurations `make demo` runs (VIEW=1 and JAEGER=1 included). Leaving
// out the load-balancing exporter (and the Kubernetes, AWS and Azure
// clients it brings), auth, pprof, batch and resource makes its cold build
// a fraction of the full one's.
func components() (otelcol.Factories, error) {
	var err error
	f := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	if f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](
		otlpreceiver.NewFactory(),
	); err != nil {
		return f, err
	}
	if f.Processors, err = otelcol.MakeFactoryMap[processor.Factory](
		memorylimiterprocessor.NewFactory(),
		deltatocumulativeprocessor.NewFactory(),
		invocationprocessor.NewFactory(),
	); err != nil {
		return f, err
	}
	if f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](
		debugexporter.NewFactory(),
		otlpexporter.NewFactory(),
		fileexporter.NewFactory(),
		prometheusexporter.NewFactory(),
	); err != nil {
		return f, err
	}
	if f.Extensions, err = otelcol.MakeFactoryMap[extension.Factory](
		filestorage.NewFactory(),
		healthcheckextension.NewFactory(),
		invocationstatusextension.NewFactory(),
	); err != nil {
		return f, err
	}
	if f.Connectors, err = otelcol.MakeFactoryMap[connector.Factory](
		signaltometricsconnector.NewFactory(),
	); err != nil {
		return f, err
	}
	return f, nil
}
