module github.com/agentledger/agentledger/processor/invocationprocessor

go 1.26.0

replace (
	github.com/agentledger/agentledger => ../..
	github.com/agentledger/agentledger/extension/invocationstatusextension => ../../extension/invocationstatusextension
)

require (
	github.com/agentledger/agentledger v0.0.0-00010101000000-000000000000
	github.com/agentledger/agentledger/extension/invocationstatusextension v0.0.0-00010101000000-000000000000
	github.com/open-telemetry/opentelemetry-collector-contrib/extension/storage/filestorage v0.161.0
	github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest v0.161.0
	github.com/stretchr/testify v1.12.1
	go.etcd.io/bbolt v1.5.0
	go.opentelemetry.io/collector/client v1.67.0
	go.opentelemetry.io/collector/component v1.67.0
	go.opentelemetry.io/collector/component/componenttest v0.161.0
	go.opentelemetry.io/collector/confmap v1.67.0
	go.opentelemetry.io/collector/consumer v1.67.0
	go.opentelemetry.io/collector/consumer/consumererror v0.161.0
	go.opentelemetry.io/collector/consumer/consumertest v0.161.0
	go.opentelemetry.io/collector/extension/extensiontest v0.161.0
	go.opentelemetry.io/collector/extension/xextension v0.161.0
	go.opentelemetry.io/collector/featuregate v1.67.0
	go.opentelemetry.io/collector/pdata v1.67.0
	go.opentelemetry.io/collector/pdata/xpdata v0.161.0
	go.opentelemetry.io/collector/processor v1.67.0
	go.opentelemetry.io/collector/processor/processortest v0.161.0
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/metric v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
	go.uber.org/goleak v1.3.0
	go.uber.org/zap v1.28.0
)

require (
	github.com/Microsoft/go-winio v0.6.2 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/felixge/httpsnoop v1.1.0 // indirect
	github.com/foxboron/go-tpm-keyfiles v0.0.0-20251226215517-609e4778396f // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/go-viper/mapstructure/v2 v2.5.0 // indirect
	github.com/gobwas/glob v0.2.3 // indirect
	github.com/golang/snappy v1.0.0 // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/go-version v1.9.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/klauspost/compress v1.20.0 // indirect
	github.com/knadh/koanf/maps v0.1.3 // indirect
	github.com/knadh/koanf/providers/confmap v1.0.1 // indirect
	github.com/knadh/koanf/v2 v2.3.6 // indirect
	github.com/mitchellh/copystructure v1.2.0 // indirect
	github.com/mitchellh/reflectwalk v1.0.2 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatautil v0.161.0 // indirect
	github.com/pierrec/lz4/v4 v4.1.29 // indirect
	github.com/rs/cors v1.11.1 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/collector/component/componentstatus v0.161.0 // indirect
	go.opentelemetry.io/collector/config/configauth v1.67.0 // indirect
	go.opentelemetry.io/collector/config/configcompression v1.67.0 // indirect
	go.opentelemetry.io/collector/config/confighttp v0.161.0 // indirect
	go.opentelemetry.io/collector/config/configmiddleware v1.67.0 // indirect
	go.opentelemetry.io/collector/config/confignet v1.67.0 // indirect
	go.opentelemetry.io/collector/config/configopaque v1.67.0 // indirect
	go.opentelemetry.io/collector/config/configoptional v1.67.0 // indirect
	go.opentelemetry.io/collector/config/configtls v1.67.0 // indirect
	go.opentelemetry.io/collector/consumer/xconsumer v0.161.0 // indirect
	go.opentelemetry.io/collector/extension v1.67.0 // indirect
	go.opentelemetry.io/collector/extension/extensionauth v1.67.0 // indirect
	go.opentelemetry.io/collector/extension/extensionmiddleware v0.161.0 // indirect
	go.opentelemetry.io/collector/internal/componentalias v0.161.0 // indirect
	go.opentelemetry.io/collector/pdata/pprofile v0.161.0 // indirect
	go.opentelemetry.io/collector/pdata/testdata v0.161.0 // indirect
	go.opentelemetry.io/collector/pipeline v1.67.0 // indirect
	go.opentelemetry.io/collector/processor/xprocessor v0.161.0 // indirect
	go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp v0.71.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/sdk v1.47.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260928230214-8a89bd6388cc // indirect
	google.golang.org/grpc v1.83.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
