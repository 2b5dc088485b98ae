package phonehome

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	formType = "application/x-www-form-urlencoded"
	jsonType = "application/json"
)

func readFixture(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fixtureKeys are the host keys in the 22.4 form fixture, by alias.
func fixtureKeys(t testing.TB) map[string]string {
	t.Helper()
	vals, err := url.ParseQuery(string(readFixture(t, "form/cloud-init-22.4-all.txt")))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"rsa":     strings.TrimSpace(vals.Get("pub_key_rsa")),
		"ecdsa":   strings.TrimSpace(vals.Get("pub_key_ecdsa")),
		"ed25519": strings.TrimSpace(vals.Get("pub_key_ed25519")),
	}
}

// jsonBody is a reporter's JSON report carrying cloudInit (raw JSON, may be nil).
func jsonBody(t testing.TB, cloudInit []byte) []byte {
	t.Helper()
	keys := fixtureKeys(t)
	m := map[string]any{
		"instance_id": "iid-gpu-01",
		"hostname":    "gpu-01",
		"fqdn":        "gpu-01.lab.example",
		"host_keys": map[string]string{
			"ssh-ed25519": strings.Fields(keys["ed25519"])[1],
			"ecdsa":       keys["ecdsa"],
		},
		"addresses": []map[string]string{
			{"interface": "enp1s0", "mac": "52:54:00:12:34:56", "address": "10.0.2.15/24"},
			{"interface": "enp1s0", "mac": "52:54:00:12:34:56", "address": "fec0::5054:ff:fe12:3456/64"},
		},
		"gpus": []map[string]any{{"name": "NVIDIA A10", "driver_version": "550.54.14", "memory_mib": 23028}},
	}
	if cloudInit != nil {
		m["cloud_init"] = json.RawMessage(cloudInit)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// encodeJSONReport renders r back into the JSON wire format, the cloud-init
// part as 23.4+ status output.
func encodeJSONReport(r *Report) ([]byte, error) {
	w := map[string]any{
		"instance_id": r.InstanceID,
		"hostname":    r.Hostname,
		"fqdn":        r.FQDN,
	}
	if r.Token != "" {
		w["token"] = r.Token
	}
	if len(r.HostKeys) > 0 {
		w["host_keys"] = r.HostKeys
	}
	var addrs []wireAddress
	for _, a := range r.Addresses {
		addrs = append(addrs, wireAddress(a))
	}
	w["addresses"] = addrs
	var gpus []wireGPU
	for _, g := range r.GPUs {
		gpus = append(gpus, wireGPU(g))
	}
	w["gpus"] = gpus
	var routes []wireRoute
	for _, rt := range r.Routes {
		routes = append(routes, wireRoute{Destination: rt.Destination, Gateway: rt.Gateway, Interface: rt.Interface})
	}
	w["routes"] = routes
	w["dns_servers"] = r.DNSServers
	var checks []wireCheck
	for _, c := range r.Checks {
		var ok *bool
		if c.Result != CheckUnknown {
			v := c.Result == CheckOK
			ok = &v
		}
		checks = append(checks, wireCheck{What: c.What, Expected: c.Expected, Found: c.Found, OK: ok})
	}
	w["checks"] = checks
	if c := r.CloudInit; c != nil {
		rec := map[string][]string{}
		for _, m := range c.RecoverableErrors {
			level, msg, _ := strings.Cut(m, ": ")
			rec[level] = append(rec[level], msg)
		}
		w["cloud_init"] = map[string]any{
			"status":             c.Status,
			"extended_status":    c.ExtendedStatus,
			"errors":             c.Errors,
			"recoverable_errors": rec,
			"datasource":         c.Datasource,
			"detail":             c.Detail,
			"boot_status_code":   c.BootStatusCode,
			"last_update":        c.LastUpdate,
		}
	}
	return json.Marshal(w)
}
