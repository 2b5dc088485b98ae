package virt

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// A flatten's target must name no backing store: that is what makes
// libvirt's qemu-img convert write a standalone image rather than another
// overlay.
func TestFlattenXMLHasNoBackingStore(t *testing.T) {
	t.Parallel()
	doc, err := flattenXML("golden.qcow2", 3<<30)
	if err != nil {
		t.Fatal(err)
	}
	var v libvirtxml.StorageVolume
	if err := v.Unmarshal(doc); err != nil {
		t.Fatal(err)
	}
	if v.BackingStore != nil || strings.Contains(doc, "backingStore") {
		t.Errorf("target names a backing store:\n%s", doc)
	}
	if v.Name != "golden.qcow2" || v.Target.Format.Type != "qcow2" || sizeInBytes(v.Capacity) != 3<<30 {
		t.Errorf("target %s", doc)
	}
}

func TestCountingWriterDigest(t *testing.T) {
	t.Parallel()
	h := sha256.New()
	cw := &countingWriter{w: h}
	for _, s := range []string{"kohaku ", "golden ", "image"} {
		if _, err := cw.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	got := hostapi.DigestOf(h, cw.n.Load())
	want := sha256.Sum256([]byte("kohaku golden image"))
	if got.Bytes != 19 || got.String() != "sha256:"+hex.EncodeToString(want[:]) {
		t.Errorf("digest %+v", got)
	}
}
