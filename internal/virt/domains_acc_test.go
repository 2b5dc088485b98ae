package virt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
)

// acceptance: the domain and overlay operations against the test host.
func TestAccDomainLifecycle(t *testing.T) {
	uri := acctest.URI(t)
	pool := acctest.Env(t, "KOHAKU_TEST_POOL")
	imagePool := acctest.Env(t, "KOHAKU_TEST_IMAGE_POOL")
	base := acctest.Env(t, "KOHAKU_TEST_BASE_VOLUME")
	kernel := acctest.Env(t, "KOHAKU_TEST_KERNEL")
	initrd := acctest.Env(t, "KOHAKU_TEST_INITRD")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := New(Settings{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := make([]byte, 3)
	rand.Read(b)
	name := "kohaku-acc-virt-" + hex.EncodeToString(b)
	overlay := name + "-root.qcow2"
	var ref DomainRef
	t.Cleanup(func() {
		ctx := context.Background()
		if ref.UUID != "" {
			_, _ = c.StopDomain(ctx, ref, 0) // fails when it is not running: fine
			if err := c.UndefineDomain(ctx, ref); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
		if err := c.RemoveVolume(ctx, pool, overlay); err != nil {
			t.Logf("cleanup: %v", err) // also when the test ended before making it
		}
		os.Remove("/var/log/libvirt/qemu/" + name + ".log") // libvirt's log of the QEMU process
	})

	// Overlay: a qcow2 volume backed by the base image, never smaller.
	baseInfo, err := c.VolumeInfo(ctx, imagePool, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateOverlay(ctx, pool, overlay, imagePool, base, baseInfo.CapacityBytes-1); err == nil || !strings.Contains(err.Error(), "cannot be smaller than its backing image") {
		t.Fatalf("a smaller overlay: err = %v", err)
	}
	ov, err := c.CreateOverlay(ctx, pool, overlay, imagePool, base, baseInfo.CapacityBytes+1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if ov.Format != "qcow2" || ov.BackingPath != baseInfo.Path || ov.CapacityBytes != baseInfo.CapacityBytes+1<<30 {
		t.Errorf("overlay = %+v, base = %+v", ov, baseInfo)
	}
	var exists *OverlayExistsError
	if _, err := c.CreateOverlay(ctx, pool, overlay, imagePool, base, 0); !errors.As(err, &exists) {
		t.Errorf("a second overlay of the same name: err = %v, want OverlayExistsError", err)
	}
	if p, n, err := c.VolumeByPath(ctx, baseInfo.Path); err != nil || p != imagePool || n != base {
		t.Errorf("VolumeByPath(%s) = %s, %s, %v", baseInfo.Path, p, n, err)
	}
	if _, err := c.VolumeInfo(ctx, pool, "no-such-volume"); !errors.Is(err, ErrVolumeNotFound) {
		t.Errorf("missing volume: err = %v", err)
	}
	if _, err := c.VolumeInfo(ctx, "kohaku-acc-no-such-pool", "x"); !errors.Is(err, ErrPoolNotFound) || !strings.Contains(err.Error(), pool) {
		t.Errorf("missing pool: err = %v, want ErrPoolNotFound listing %s", err, pool)
	}

	// Define, read in three calls, start, stop, undefine.
	xml, err := domain.Marshal(domain.Spec{
		Name: name, Type: domain.TypeQEMU, VCPU: 1, MemoryMiB: 128,
		Disk:   &domain.Disk{Source: domain.Source{Pool: pool, Volume: overlay}},
		Kernel: kernel, Initrd: initrd, Cmdline: "root=/dev/vda rw console=ttyS0",
		SerialLogPath: t.TempDir() + "/serial.log",
	})
	if err != nil {
		t.Fatal(err)
	}
	if ref, err = c.DefineDomain(ctx, name, xml); err != nil {
		t.Fatal(err)
	}
	if got, err := c.LookupDomain(ctx, name); err != nil || got != ref {
		t.Errorf("LookupDomain(name) = %+v, %v; want %+v", got, err, ref)
	}
	if got, err := c.LookupDomain(ctx, strings.ToUpper(ref.UUID)); err != nil || got != ref {
		t.Errorf("LookupDomain(UUID) = %+v, %v; want %+v", got, err, ref)
	}
	before := c.RPCs()
	st, err := c.ReadDomain(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.RPCs() - before; n != 3 {
		t.Errorf("ReadDomain took %d calls, want 3", n)
	}
	if st.Active || st.Autostart || !strings.Contains(st.XML, "<name>"+name+"</name>") {
		t.Errorf("a defined domain: active=%t autostart=%t", st.Active, st.Autostart)
	}
	if err := c.SetAutostart(ctx, ref, true); err != nil {
		t.Fatal(err)
	}
	if err := c.StartDomain(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if err := c.StartDomain(ctx, ref); err != nil {
		t.Errorf("starting a running domain: %v", err)
	}
	if st, err = c.ReadDomain(ctx, ref); err != nil || !st.Active || !st.Autostart {
		t.Fatalf("after start: %+v, %v", st, err)
	}
	// The guest is still booting and ignores ACPI: forced off after the grace.
	start := time.Now()
	how, err := c.StopDomain(ctx, ref, time.Second)
	if err != nil || how == StopNotRunning {
		t.Fatalf("StopDomain = %v, %v", how, err)
	}
	if d := time.Since(start); how == StopForced && d < time.Second {
		t.Errorf("forced off after %s, before the grace period", d)
	}
	if how, err := c.StopDomain(ctx, ref, time.Second); err != nil || how != StopNotRunning {
		t.Errorf("stopping a stopped domain = %v, %v", how, err)
	}
	if err := c.UndefineDomain(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadDomain(ctx, ref); !errors.Is(err, ErrDomainNotFound) {
		t.Errorf("reading an undefined domain: err = %v", err)
	}
	if err := c.UndefineDomain(ctx, ref); err != nil {
		t.Errorf("undefining twice: %v", err)
	}
	if _, err := c.LookupDomain(ctx, name); !errors.Is(err, ErrDomainNotFound) {
		t.Errorf("LookupDomain after undefine: err = %v", err)
	}
	if err := c.RemoveVolume(ctx, pool, overlay); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.VolumeExists(ctx, pool, overlay); err != nil || ok {
		t.Errorf("overlay still there after RemoveVolume: %t, %v", ok, err)
	}
	if err := c.RemoveVolume(ctx, pool, overlay); err != nil {
		t.Errorf("removing twice: %v", err)
	}
	if baseAfter, err := c.VolumeInfo(ctx, imagePool, base); err != nil || baseAfter.Path != baseInfo.Path {
		t.Errorf("the base image changed: %+v, %v", baseAfter, err)
	}
}
