package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestStatusNeedsOTLP(t *testing.T) {
	_, err := newApp(context.Background(), config{status: []string{"http://127.0.0.1:1"}}, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err == nil || !strings.Contains(err.Error(), "-status needs -otlp") {
		t.Errorf("newApp with -status and no -otlp: %v", err)
	}
}
