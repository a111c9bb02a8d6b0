package genaicall

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// option is a sealed option as a wrapper declares it.
type option interface{ apply(*Config) }

type setting Setting

func (s setting) apply(c *Config) { s(c) }

func TestNewConfig(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	c := NewConfig([]option{
		setting(TracerProvider(tp)), nil, setting(TracerProvider(nil)),
		setting(RetryWindow(time.Second)), setting(RetryWindow(0)), setting(RetryWindow(-1)),
		setting(CaptureContent(true)), setting(Propagators(propagation.Baggage{})), setting(Propagators(nil)),
		setting(MeterProvider(nil)),
	}, option.apply)
	if c.TracerProvider != tp {
		t.Error("nil TracerProvider replaced the one given")
	}
	if c.RetryWindow != time.Second {
		t.Errorf("retry window %v", c.RetryWindow)
	}
	if !c.CaptureContent {
		t.Error("capture content off")
	}
	if _, ok := c.Propagators.(propagation.Baggage); !ok {
		t.Errorf("propagators %T", c.Propagators)
	}
	if c.MeterProvider != otel.GetMeterProvider() || c.AfterFunc == nil {
		t.Error("defaults missing")
	}

	d := NewConfig[option](nil, option.apply)
	if d.RetryWindow != DefaultRetryWindow || d.TracerProvider != nil || d.Propagators != otel.GetTextMapPropagator() {
		t.Errorf("defaults %+v", d)
	}
}
