// Command otelcol-agentledger is the agentledger OpenTelemetry Collector
// distribution: the core and contrib components an invocation-accounting
// pipeline needs, plus the invocation processor and the invocation_status
// extension it publishes its live state to.
package main

import (
	"log"
	"os"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/httpprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/otelcol"
)

func main() {
	info := component.BuildInfo{
		Command:     "otelcol-agentledger",
		Description: "agentledger OpenTelemetry Collector distribution",
		Version:     "0.1.0",
	}
	set := otelcol.CollectorSettings{
		BuildInfo: info,
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(),
					fileprovider.NewFactory(),
					httpprovider.NewFactory(),
					yamlprovider.NewFactory(),
				},
				DefaultScheme: "env",
			},
		},
	}
	cmd := otelcol.NewCommand(set)
	cmd.SetArgs(withDefaultConfig(os.Args[1:]))
	if err := cmd.Execute(); err != nil {
		log.Fatal(err)
	}
}
