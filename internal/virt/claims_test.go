package virt

import (
	"fmt"
	"slices"
	"testing"

	"github.com/digitalocean/go-libvirt"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

func TestClaimDomain_hostdevsAndOneToOnePins(t *testing.T) {
	t.Parallel()
	const doc = `<domain type='kvm'>
  <name>handmade</name>
  <vcpu placement='static'>4</vcpu>
  <cputune>
    <vcpupin vcpu='0' cpuset='4'/>
    <vcpupin vcpu='1' cpuset='5'/>
    <vcpupin vcpu='2' cpuset='0-55'/>
    <vcpupin vcpu='3' cpuset='4'/>
    <emulatorpin cpuset='55'/>
  </cputune>
  <devices>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0x0000' bus='0x3b' slot='0x00' function='0x1'/></source>
    </hostdev>
    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>
      <source><address uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/></source>
    </hostdev>
  </devices>
</domain>`
	d, err := claimDomain(doc)
	if err != nil {
		t.Fatal(err)
	}
	if want := []vfio.Address{{Bus: 0x3b, Function: 1}}; !slices.Equal(d.Hostdevs, want) {
		t.Errorf("hostdevs %v, want %v", d.Hostdevs, want)
	}
	if want := []int{4, 5}; !slices.Equal(d.PinnedCPUs, want) {
		t.Errorf("pinned %v, want %v (a pin to a whole node takes none)", d.PinnedCPUs, want)
	}
	if _, err := claimDomain("<domain"); err == nil {
		t.Error("broken XML parsed")
	}
}

func TestVolumeNameTaken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{libvirt.Error{Code: uint32(libvirt.ErrStorageVolExist), Message: "storage volume 'kohaku-claim-0000_3b_00_0' exists already"}, true},
		{fmt.Errorf("create claim: %w", libvirt.Error{Code: uint32(libvirt.ErrInternalError), Message: "internal error: storage volume name 'kohaku-claim-0000_3b_00_0' already in use."}), true},
		{libvirt.Error{Code: uint32(libvirt.ErrOperationInvalid), Message: "volume 'kohaku-scratch-1' is still in use."}, false},
		{libvirt.Error{Code: uint32(libvirt.ErrNoStoragePool), Message: "no storage pool with matching name 'kohaku-claims'"}, false},
	} {
		if got := volumeNameTaken(c.err); got != c.want {
			t.Errorf("volumeNameTaken(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
