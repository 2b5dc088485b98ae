package domain

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

func diskTargets(t *testing.T, doc string) map[string]string {
	t.Helper()
	var d libvirtxml.Domain
	if err := d.Unmarshal(doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, x := range d.Devices.Disks {
		if (x.Device == "disk" || x.Device == "") && x.Target.Dev != "vda" {
			key := x.Serial
			if key == "" {
				key = "(no serial)"
			}
			out[key] = x.Target.Dev
		}
	}
	return out
}

// Data disks are matched by serial: one that stays keeps its target when
// another goes in front of it, one Kohaku attached and the spec no longer
// names is detached, and a disk Kohaku did not attach (with or without a
// serial) stays whatever the spec says.
func TestMergeDataDisksBySerial(t *testing.T) {
	t.Parallel()
	spec := typicalSpec()
	scratch := DataDisk{Source: Source{Pool: "default", Volume: "scratch.qcow2"}, Serial: "scratch"}
	dataset := DataDisk{Source: Source{Pool: "data", Volume: "dataset.raw"}, Format: DiskRaw, Serial: "dataset"}
	spec.DataDisks = []DataDisk{scratch, dataset}
	made, err := Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := diskTargets(t, made); got["scratch"] != "vdb" || got["dataset"] != "vdc" {
		t.Fatalf("built targets %v", got)
	}
	// Someone attaches two disks of their own by hand.
	hand := `<disk type="file" device="disk"><driver name="qemu" type="raw"/><source file="/srv/their.img"/><target dev="vdd" bus="virtio"/><serial>theirs</serial></disk>` +
		`<disk type="file" device="disk"><driver name="qemu" type="raw"/><source file="/srv/plain.img"/><target dev="vde" bus="virtio"/></disk>`
	made = strings.Replace(made, "<disk ", hand+"<disk ", 1)

	// scratch goes; dataset stays on vdc; a new one takes the first free target.
	logs := DataDisk{Source: Source{Pool: "default", Volume: "logs.qcow2"}, Serial: "logs"}
	spec.DataDisks = []DataDisk{dataset, logs}
	got, err := Merge(made, spec)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"(no serial)": "vde", "theirs": "vdd", "dataset": "vdc", "logs": "vdb"}
	targets := diskTargets(t, got)
	for k, v := range want {
		if targets[k] != v {
			t.Errorf("disk %s on %q, want %q (all: %v)", k, targets[k], v, targets)
		}
	}
	if _, ok := targets["scratch"]; ok {
		t.Errorf("scratch is still attached: %v", targets)
	}
	o, err := Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(o.Metadata.DataDisks, ","); s != "dataset,logs" {
		t.Errorf("metadata records data disks %q, want dataset,logs", s)
	}

	// With no data disks at all, Kohaku's go and the hand-attached stay.
	spec.DataDisks = nil
	got, err = Merge(got, spec)
	if err != nil {
		t.Fatal(err)
	}
	targets = diskTargets(t, got)
	if targets["theirs"] != "vdd" || targets["(no serial)"] != "vde" || targets["dataset"] != "" || targets["logs"] != "" {
		t.Errorf("after removing every data disk: %v", targets)
	}
}

func TestValidateDataDisks(t *testing.T) {
	t.Parallel()
	ok := DataDisk{Source: Source{Pool: "default", Volume: "a.qcow2"}, Serial: "a"}
	cases := map[string]struct {
		disks []DataDisk
		says  string
	}{
		"no serial":        {[]DataDisk{{Source: ok.Source}}, "data_disks[0].serial"},
		"long serial":      {[]DataDisk{{Source: ok.Source, Serial: strings.Repeat("x", 21)}}, "more than the 20"},
		"odd serial":       {[]DataDisk{{Source: ok.Source, Serial: "a b"}}, "characters other than"},
		"duplicate serial": {[]DataDisk{ok, ok}, "another data disk"},
		"no volume":        {[]DataDisk{{Source: Source{Pool: "default"}, Serial: "b"}}, "names no pool and volume"},
		"odd format":       {[]DataDisk{{Source: ok.Source, Serial: "b", Format: "vmdk"}}, "neither qcow2 nor raw"},
	}
	for name, c := range cases {
		s := typicalSpec()
		s.DataDisks = c.disks
		err := Validate(s)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want it to say %q", name, err, c.says)
		}
	}
	s := typicalSpec()
	s.DataDisks = []DataDisk{ok}
	if err := Validate(s); err != nil {
		t.Errorf("a good data disk: %v", err)
	}
}
