package provider

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
	"github.com/kohaku/terraform-provider-kohaku/internal/ready"
)

func parsedReport(t *testing.T, body string) *ready.Outcome {
	t.Helper()
	rep, err := phonehome.ParseReport("application/json", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return &ready.Outcome{Report: rep, Waited: 42 * time.Second}
}

const mismatchReport = `{"hostname": "w16r", "cloud_init": {"status": "done", "errors": []},
 "routes": [{"destination": "10.0.2.0/24", "gateway": "", "interface": "enp1s0"}, {"destination": "::/0", "gateway": "fe80::2", "interface": "enp1s0"}],
 "dns_servers": ["10.0.2.3"],
 "checks": [{"what": "IPv4 default route", "expected": "via 10.0.2.2 on enp1s0 (52:54:00:12:34:56)", "found": "none", "ok": false}]}`

// on_config_mismatch = "fail" makes a mismatch the wait's error; "warn"
// leaves it to create's warning; cloud-init's own failure is reported as
// that, not as a mismatch.
func TestWaitMismatchDecision(t *testing.T) {
	t.Parallel()
	out := parsedReport(t, mismatchReport)
	err := (&vmWait{failOnMismatch: true}).mismatch("w16r", out)
	var me *ready.MismatchError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "no IPv4 default route via 10.0.2.2 on enp1s0 (52:54:00:12:34:56)") {
		t.Errorf("fail mode: %v", err)
	}
	if err := (&vmWait{}).mismatch("w16r", out); err != nil {
		t.Errorf("warn mode: %v", err)
	}
	if w, err := ready.Check("w16r", out.Report); err != nil || len(w) != 1 || !strings.Contains(w[0], "no IPv4 default route via 10.0.2.2") {
		t.Errorf("warn mode warnings: %v %v", w, err)
	}
	failed := parsedReport(t, strings.Replace(mismatchReport, `"status": "done", "errors": []`, `"status": "error", "errors": ["boom"]`, 1))
	if err := (&vmWait{failOnMismatch: true}).mismatch("w16r", failed); err != nil {
		t.Errorf("a cloud-init failure became a mismatch: %v", err)
	}
	good := parsedReport(t, strings.Replace(mismatchReport, `"ok": false`, `"ok": true`, 1))
	if err := (&vmWait{failOnMismatch: true}).mismatch("w16r", good); err != nil {
		t.Errorf("a guest configured as declared: %v", err)
	}
}

// The guest's routes and DNS servers go into guest beside the addresses.
func TestGuestValueHasRoutesAndDNS(t *testing.T) {
	t.Parallel()
	v := guestValue(ready.ModeChannel, parsedReport(t, mismatchReport))
	routes := v.Attributes()["routes"].(types.List).Elements()
	if len(routes) != 2 {
		t.Fatalf("routes = %v", routes)
	}
	r := routes[1].(types.Object).Attributes()
	if r["destination"].(types.String).ValueString() != "::/0" || r["gateway"].(types.String).ValueString() != "fe80::2" || r["interface"].(types.String).ValueString() != "enp1s0" {
		t.Errorf("route = %v", r)
	}
	if got := v.Attributes()["dns_servers"].String(); got != `["10.0.2.3"]` {
		t.Errorf("dns_servers = %s", got)
	}
	empty := guestValue(ready.ModeGuestAgent, &ready.Outcome{Report: &phonehome.Report{Kind: "guest_agent"}})
	if l := empty.Attributes()["routes"].(types.List); l.IsNull() || len(l.Elements()) != 0 {
		t.Errorf("routes without a reporter = %v, want an empty list", l)
	}
	if l := empty.Attributes()["dns_servers"].(types.List); l.IsNull() || len(l.Elements()) != 0 {
		t.Errorf("dns_servers without a reporter = %v, want an empty list", l)
	}
}
