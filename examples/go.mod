module github.com/agentledger/agentledger/examples

go 1.26.0

replace (
	github.com/agentledger/agentledger => ..
	github.com/agentledger/agentledger/dashboards => ../dashboards
	github.com/agentledger/agentledger/extension/invocationstatusextension => ../extension/invocationstatusextension
	github.com/agentledger/agentledger/instrument/otelanthropic => ../instrument/otelanthropic
	github.com/agentledger/agentledger/instrument/otelclaudecode => ../instrument/otelclaudecode
	github.com/agentledger/agentledger/instrument/otelcodex => ../instrument/otelcodex
	github.com/agentledger/agentledger/instrument/otelopenai => ../instrument/otelopenai
	github.com/agentledger/agentledger/instrument/otelopencode => ../instrument/otelopencode
	github.com/agentledger/agentledger/internal/testbin => ../internal/testbin
	github.com/agentledger/agentledger/processor/invocationprocessor => ../processor/invocationprocessor
)

require (
	github.com/agentledger/agentledger v0.0.0-00010101000000-000000000000
	github.com/agentledger/agentledger/extension/invocationstatusextension v0.0.0-00010101000000-000000000000
	github.com/agentledger/agentledger/instrument/otelanthropic v0.0.0-00010101000000-000000000000
	github.com/agentledger/agentledger/instrument/otelclaudecode v0.0.0-00010101000000-000000000000
	github.com/agentledger/agentledger/instrument/otelcodex v0.0.0-00010101000000-000000000000
	github.com/agentledger/agentledger/instrument/otelopenai v0.0.0-00010101000000-000000000000
	github.com/agentledger/agentledger/instrument/otelopencode v0.0.0-00010101000000-000000000000
	github.com/anthropics/anthropic-sdk-go/v2 v2.15.0
	github.com/openai/openai-go/v3 v3.98.0
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc v1.47.0
	go.opentelemetry.io/otel/sdk v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
	go.opentelemetry.io/proto/otlp v1.11.0
	google.golang.org/grpc v1.83.2
)

require (
	github.com/bahlo/generic-list-go v0.2.0 // indirect
	github.com/buger/jsonparser v1.1.2 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/coder/websocket v1.8.15 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.30.0 // indirect
	github.com/invopop/jsonschema v0.14.0 // indirect
	github.com/pb33f/ordered-map/v2 v2.3.1 // indirect
	github.com/standard-webhooks/standard-webhooks/libraries v0.0.1 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/exporters/otlp/otlptrace v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.yaml.in/yaml/v4 v4.0.0-rc.6 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/api v0.290.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260928230214-8a89bd6388cc // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260928230214-8a89bd6388cc // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
)
