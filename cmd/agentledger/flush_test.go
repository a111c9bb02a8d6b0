package main

import (
	"testing"
	"time"
)

func TestReadFlushTimeout(t *testing.T) {
	for v, want := range map[string]time.Duration{"": defaultFlushTimeout, "0": -1, "0s": -1, "750ms": 750 * time.Millisecond} {
		env := envOf()
		if v != "" {
			env = envOf(envFlushTimeout + "=" + v)
		}
		got, err := readFlushTimeout(env)
		if err != nil || got != want {
			t.Errorf("%s=%q: %v, %v; want %v", envFlushTimeout, v, got, err, want)
		}
	}
	for _, v := range []string{"-1s", "soon", "5"} {
		if _, err := readFlushTimeout(envOf(envFlushTimeout + "=" + v)); err == nil {
			t.Errorf("%s=%q: no error", envFlushTimeout, v)
		}
	}
}
