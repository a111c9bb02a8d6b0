package main

import (
	"os"
	"slices"
	"testing"
)

func TestDefaultConfigIsLocalYAML(t *testing.T) {
	want, err := os.ReadFile("../../collector-config/local.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if defaultConfig != string(want) {
		t.Fatal("the embedded default differs from collector-config/local.yaml: run `go generate ./cmd/otelcol-agentledger`")
	}
}

func TestWithDefaultConfig(t *testing.T) {
	def := "--config=yaml:" + defaultConfig
	for _, tc := range []struct {
		args []string
		add  bool
	}{
		{nil, true},
		{[]string{"--feature-gates=foo"}, true},
		{[]string{"validate"}, true},
		{[]string{"--config", "x.yaml"}, false},
		{[]string{"--config=x.yaml"}, false},
		{[]string{"-config", "x.yaml"}, false},
		{[]string{"--set=processors.invocation.open_timeout=1h"}, false},
		{[]string{"validate", "--config", "x.yaml"}, false},
		{[]string{"components"}, false},
		{[]string{"--help"}, false},
		{[]string{"--version"}, false},
	} {
		got := withDefaultConfig(tc.args)
		added := len(got) == len(tc.args)+1 && got[len(got)-1] == def
		if added != tc.add || !slices.Equal(got[:len(tc.args)], tc.args) {
			t.Errorf("withDefaultConfig(%q): default added = %v, want %v", tc.args, added, tc.add)
		}
	}
}
