package vmlife

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// A seed with one large write_files entry, bigger than the 8 MiB kohaku_vm
// used to read of a seed, resolves: kohaku_vm reads seeds up to the cap
// kohaku_seed stores them with.
func TestResolveReadsALargeSeed(t *testing.T) {
	t.Parallel()
	res, err := seed.Render(&seed.Spec{
		Name: "big", ReportChannel: true,
		Network:    []seed.NIC{{DHCP4: true}},
		WriteFiles: []seed.File{{Path: "/opt/big.txt", Content: bytes.Repeat([]byte("kohaku\n"), 12<<20/7)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.ISO) <= 8<<20 || len(res.ISO) > seed.MaxVolumeBytes {
		t.Fatalf("the test seed is %d bytes; it must be over 8 MiB and within MaxVolumeBytes", len(res.ISO))
	}
	h := newFakeHost()
	h.seeds["default/big.iso"] = res.ISO
	h.addVolume("default", "big.iso", "raw", int64(len(res.ISO)))
	spec := domain.Spec{Name: "vm", NICs: []domain.NIC{{Type: domain.NICUser}}, Seed: &domain.Seed{Source: domain.Source{Pool: "default", Volume: "big.iso"}}}
	r, err := Resolve(context.Background(), h, Want{Spec: spec, InspectSeed: true}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Seed == nil || r.Seed.ReportToken == "" || len(r.Seed.MACs) != 1 {
		t.Fatalf("inspection %+v", r.Seed)
	}
	if r.Spec.NICs[0].MAC != r.Seed.MACs[0] {
		t.Errorf("NIC MAC %q, want the seed's %q", r.Spec.NICs[0].MAC, r.Seed.MACs[0])
	}
	// One byte over the cap is refused by the read, and says which seed.
	h.seeds["default/big.iso"] = make([]byte, seed.MaxVolumeBytes+1)
	_, err = Resolve(context.Background(), h, Want{Spec: spec, InspectSeed: true}, nil, true)
	var se *StepError
	if !errors.As(err, &se) || se.Step != "read the seed" || !strings.Contains(err.Error(), "default/big.iso") {
		t.Errorf("error %v", err)
	}
}

func TestResolveSteps(t *testing.T) {
	t.Parallel()
	t.Run("a missing seed volume", func(t *testing.T) {
		h := newFakeHost()
		spec := domain.Spec{Name: "vm", Seed: &domain.Seed{Source: domain.Source{Pool: "default", Volume: "gone.iso"}}}
		_, err := Resolve(context.Background(), h, Want{Spec: spec}, nil, true)
		var se *StepError
		if !errors.As(err, &se) || se.Step != "look up the seed" || !errors.Is(err, virt.ErrNotFound) {
			t.Errorf("error %v", err)
		}
	})
	t.Run("an existing volume's format", func(t *testing.T) {
		h := newFakeHost()
		h.addVolume("default", "disk.img", "raw", 1<<30)
		h.addVolume("default", "disk.vmdk", "vmdk", 1<<30)
		spec := domain.Spec{Name: "vm", Disk: &domain.Disk{Source: domain.Source{Pool: "default", Volume: "disk.img"}, Format: domain.DiskQCOW2}}
		r, err := Resolve(context.Background(), h, Want{Spec: spec, DiskMode: "volume"}, nil, true)
		if err != nil || r.Spec.Disk.Format != domain.DiskRaw {
			t.Errorf("format %v, error %v", r.Spec.Disk.Format, err)
		}
		spec.Disk = &domain.Disk{Source: domain.Source{Pool: "default", Volume: "disk.vmdk"}}
		_, err = Resolve(context.Background(), h, Want{Spec: spec, DiskMode: "volume"}, nil, true)
		if err == nil || !strings.Contains(err.Error(), "in vmdk format") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("shared folders are checked on a local host only", func(t *testing.T) {
		h := newFakeHost()
		spec := domain.Spec{Name: "vm", SharedFolders: append(sharedFolders(t.TempDir()), sharedFolders("/nonexistent/kohaku")...)}
		if _, err := Resolve(context.Background(), h, Want{Spec: spec}, nil, true); err != nil {
			t.Errorf("remote host: %v", err)
		}
		h.transport = virt.TransportUnix
		_, err := Resolve(context.Background(), h, Want{Spec: spec}, nil, true)
		var share *ShareError
		if !errors.As(err, &share) || share.Index != 1 || !strings.Contains(err.Error(), "mkdir -p /nonexistent/kohaku") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("a gpus entry the host does not have", func(t *testing.T) {
		h := newFakeHost()
		_, err := Resolve(context.Background(), h, Want{Spec: domain.Spec{Name: "vm"}, GPUs: []string{"0000:65:00.0"}}, nil, true)
		var ge *GPUEntryError
		if !errors.As(err, &ge) || ge.Entry != "0000:65:00.0" {
			t.Errorf("error %v", err)
		}
	})
}
