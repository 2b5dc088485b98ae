package seed

import (
	"regexp"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
)

// The first-boot reporter writes to the port the provider reads: the
// script's default port is the guest's view of phonehome.ReportChannel,
// the one name of the channel in Go.
func TestReporterScriptUsesTheReportChannel(t *testing.T) {
	t.Parallel()
	m := regexp.MustCompile(`"/dev/virtio-ports/([^"]+)"`).FindAllSubmatch(reporterScript, -1)
	if len(m) != 1 {
		t.Fatalf("reporter.py names %d virtio ports, want one default port", len(m))
	}
	if got := string(m[0][1]); got != phonehome.ReportChannel {
		t.Errorf("reporter.py writes to /dev/virtio-ports/%s, the provider reads %s", got, phonehome.ReportChannel)
	}
}
