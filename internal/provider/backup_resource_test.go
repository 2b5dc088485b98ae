package provider

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// A backup's snapshot id, disk and name are refused before any host is
// asked, on their own line, saying what would do.
func TestBackup_validation(t *testing.T) {
	t.Parallel()
	const snap = `"5a1d9c4e-3f00-4b2a-9c1e-0d2f6b7a8e91/nightly"`
	for _, c := range []struct{ attrs, want string }{
		{`snapshot = "nightly"` + "\n  disk = \"data\"\n  pool = \"backups\"\n  name = \"db.qcow2\"", `(?s)Invalid snapshot id.*kohaku_snapshot's id`},
		{`snapshot = ` + snap + "\n  disk = \"data disk\"\n  pool = \"backups\"\n  name = \"db.qcow2\"", `(?s)Invalid disk.*not a disk of a snapshot: use "boot" or a data disk's serial`},
		{`snapshot = ` + snap + "\n  disk = \"data\"\n  pool = \"backups\"\n  name = \"db/x.qcow2\"", `(?s)Invalid backup name.*not a backup volume name`},
		{`snapshot = ` + snap + "\n  disk = \"data\"\n  pool = \"backups\"\n  name = \"db.qcow2.kohaku-backup\"", `(?s)Invalid backup name.*not ending in\s+.kohaku-backup`},
		{`snapshot = ` + snap + "\n  disk = \"data\"\n  pool = \"\"\n  name = \"db.qcow2\"", `(?s)pool.*at least 1`},
	} {
		resource.UnitTest(t, resource.TestCase{ProtoV6ProviderFactories: protoV6Providers, Steps: []resource.TestStep{{
			Config:      providerBlock("test:///default") + "resource \"kohaku_backup\" \"x\" {\n  " + c.attrs + "\n}\n",
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(c.want),
		}}})
	}
}

// A data disk restored from a backup is one of size_gib, volume and
// source; from the VM's own host; qcow2; and changing its source is a
// change of the disk, refused in place like its size.
func TestDataDiskSource_validation(t *testing.T) {
	t.Parallel()
	restored := func(source, format string) vmDataDiskModel {
		d := newDataDisk("restored", 0, false)
		d.SizeGiB, d.Source = types.Int64Null(), str(source)
		if format != "" {
			d.Format = str(format)
		}
		return d
	}
	for _, c := range []struct {
		name   string
		disk   vmDataDiskModel
		vmHost types.String
		want   string
	}{
		{"restored", restored("backups/db.qcow2", ""), types.StringNull(), ""},
		{"restored on a host of the map", restored("gpu2/backups/db.qcow2", ""), str("gpu2"), ""},
		{"unknown host", restored("gpu2/backups/db.qcow2", ""), types.StringUnknown(), ""},
		{"other host", restored("gpu2/backups/db.qcow2", ""), types.StringNull(), `Backup on another host: The backup gpu2/backups/db.qcow2 is on host "gpu2", and the VM on the default host`},
		{"raw", restored("backups/db.qcow2", "raw"), types.StringNull(), "A restored disk is qcow2"},
		{"with a size", func() vmDataDiskModel {
			d := restored("backups/db.qcow2", "")
			d.SizeGiB = types.Int64Value(2)
			return d
		}(), types.StringNull(), "Data disk needs one of size_gib, volume and source"},
		{"neither", func() vmDataDiskModel { d := restored("", ""); d.Source = types.StringNull(); return d }(), types.StringNull(), "Data disk needs one of size_gib, volume and source"},
	} {
		var diags diag.Diagnostics
		validateDataDisks([]vmDataDiskModel{c.disk}, c.vmHost, &diags)
		var got []string
		for _, d := range diags.Errors() {
			got = append(got, d.Summary()+": "+d.Detail())
		}
		if joined := strings.Join(got, "\n"); (c.want == "") != (joined == "") || !strings.Contains(joined, c.want) {
			t.Errorf("%s: errors %q, want %q", c.name, joined, c.want)
		}
	}

	d := restored("backups/db.qcow2", "")
	state := &vmModel{Name: str("web-1"), DataDisks: dataDiskList(t, d)}
	other := d
	other.Source = str("backups/db-older.qcow2")
	var diags diag.Diagnostics
	planDataDisks(context.Background(), &vmModel{DataDisks: dataDiskList(t, other)}, state, &diags)
	if !diags.HasError() || !strings.Contains(diags.Errors()[0].Detail(), "changes its size, volume, source") {
		t.Errorf("another source in place: %v", diags)
	}
	diags = nil
	planDataDisks(context.Background(), &vmModel{DataDisks: dataDiskList(t)}, state, &diags)
	if diags.HasError() || diags.WarningsCount() != 1 || !strings.Contains(diags.Warnings()[0].Detail(), "default/web-1-restored.qcow2") {
		t.Errorf("removing a restored disk: %v, want the warning that its volume is deleted", diags)
	}
}
