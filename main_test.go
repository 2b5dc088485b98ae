package main

import (
	"os"
	"testing"
)

func TestQuietLogs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		sdk, own string // want; "-" is unset
	}{
		{"terraform shows nothing", map[string]string{}, "OFF", "OFF"},
		{"TF_LOG set", map[string]string{"TF_LOG": "TRACE"}, "-", "-"},
		{"TF_LOG_PROVIDER set", map[string]string{"TF_LOG_PROVIDER": "DEBUG"}, "-", "-"},
		{"explicit SDK level kept", map[string]string{"TF_LOG_SDK": "INFO"}, "INFO", "OFF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"TF_LOG", "TF_LOG_PROVIDER", "TF_LOG_SDK", "TF_LOG_PROVIDER_KOHAKU"} {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			quietLogs()
			get := func(k string) string {
				if v, ok := os.LookupEnv(k); ok {
					return v
				}
				return "-"
			}
			if got := get("TF_LOG_SDK"); got != tc.sdk {
				t.Errorf("TF_LOG_SDK = %q, want %q", got, tc.sdk)
			}
			if got := get("TF_LOG_PROVIDER_KOHAKU"); got != tc.own {
				t.Errorf("TF_LOG_PROVIDER_KOHAKU = %q, want %q", got, tc.own)
			}
		})
	}
}
