package virt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
)

// Detach and reattach QEMU's edu device inside the nested host: it has no
// host driver, so nothing in L1 depends on it.
func TestAccNodeDeviceDetachReattach(t *testing.T) {
	c, h := nestedClient(t)
	ctx := context.Background()
	docs, err := c.PCINodeDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	name := nestedhost.NodeDeviceName(h.EDU)
	found := false
	for _, d := range docs {
		if strings.Contains(d, "<name>"+name+"</name>") {
			found = true
			if !strings.Contains(d, "<iommuGroup") {
				t.Errorf("the nested host shows no IOMMU group for %s:\n%s", name, d)
			}
		}
	}
	if !found || len(docs) < 5 {
		t.Fatalf("%d PCI devices listed, %s among them: %v", len(docs), name, found)
	}
	if _, err := c.NodeDeviceXML(ctx, "pci_0000_7f_1f_7"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing device: %v, want ErrNotFound", err)
	}
	if err := c.DetachNodeDevice(ctx, "pci_0000_7f_1f_7", "vfio"); !errors.Is(err, ErrNotFound) {
		t.Errorf("detaching a missing device: %v, want ErrNotFound", err)
	}

	t.Cleanup(func() { _, _ = nestedhost.VirshErr(h, "nodedev-reattach", name) })
	start := time.Now()
	if err := c.DetachNodeDevice(ctx, name, "vfio"); err != nil {
		t.Fatal(err)
	}
	t.Logf("detach to vfio: %s", time.Since(start).Round(time.Millisecond))
	if d := nestedhost.Driver(t, h, h.EDU); d != "vfio-pci" {
		t.Fatalf("after detach the driver is %q, want vfio-pci", d)
	}
	doc, err := c.NodeDeviceXML(ctx, name)
	if err != nil || !strings.Contains(doc, "<name>vfio-pci</name>") {
		t.Errorf("NodeDeviceXML after detach: %v\n%s", err, doc)
	}
	users, err := c.PCIHostdevUsers(ctx)
	if err != nil || len(users[h.EDU]) != 0 {
		t.Errorf("hostdev users: %v %v", users, err)
	}
	start = time.Now()
	if err := c.ReattachNodeDevice(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Logf("reattach: %s", time.Since(start).Round(time.Millisecond))
	if d := nestedhost.Driver(t, h, h.EDU); d != "" {
		t.Errorf("after reattach the driver is %q, want none (edu has no host driver)", d)
	}
}

// nestedClient connects to the nested host after nestedhost.Require has
// checked that the URI leads there and nowhere else.
func nestedClient(t *testing.T) (*Client, *nestedhost.Host) {
	t.Helper()
	h := nestedhost.Require(t)
	c, err := New(Settings{URI: h.URI, CallTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, h
}
