package sriov

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Host is what reading and setting a host's SR-IOV vGPUs needs of its
// connection: libvirt's PCI node devices, and the host's sysfs files
// (local and SSH connections only: ReadsHostFiles).
type Host interface {
	PCINodeDevices(ctx context.Context) ([]string, error)
	ReadsHostFiles() bool
	vfio.HostFiles
	Writer
	VendorTool
}

// ErrNoHostFiles is a host whose connection cannot read or write its
// sysfs (qemu+tcp, qemu+tls): SR-IOV vGPUs need local or SSH connections.
var ErrNoHostFiles = errors.New("SR-IOV vGPUs are read and set through the host's sysfs, which Kohaku reaches only over local (qemu:///system) and SSH (qemu+ssh://) connections")

// Inspect reads one PF of h.
func Inspect(ctx context.Context, h Host, pf vfio.Address) (*GPU, error) {
	if !h.ReadsHostFiles() {
		return nil, ErrNoHostFiles
	}
	inv, err := inventory(ctx, h)
	if err != nil {
		return nil, err
	}
	return ReadGPU(ctx, inv, h, pf)
}

// InspectAll reads every SR-IOV GPU of h.
func InspectAll(ctx context.Context, h Host) ([]GPU, error) {
	if !h.ReadsHostFiles() {
		return nil, ErrNoHostFiles
	}
	inv, err := inventory(ctx, h)
	if err != nil {
		return nil, err
	}
	return Read(ctx, inv, h)
}

func inventory(ctx context.Context, h Host) (*vfio.Inventory, error) {
	docs, err := h.PCINodeDevices(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the host's PCI devices: %w", err)
	}
	return vfio.ParseInventory(docs)
}

// Candidate is one GPU of one host that a vGPU could go to.
type Candidate struct {
	Host string
	GPU  *GPU
}

// Choice is a VF chosen for a vGPU type: its host, GPU and the type as
// that GPU names it.
type Choice struct {
	Host string
	GPU  vfio.Address
	VF   vfio.Address
	Type Type
}

// NoFitError says why no GPU of any host can take the type, host by host.
type NoFitError struct {
	Want    string
	Reasons []string
}

func (e *NoFitError) Error() string {
	return fmt.Sprintf("no GPU can take a vGPU of type %q now: %s", e.Want, strings.Join(e.Reasons, "; "))
}

// Order sorts the candidates that can take want now the way Kohaku
// places a vGPU (pack): first the GPUs that already run the type (their
// one type is spoken for), then those with the fewest instances of it
// left, then by host name and PCI address, a stable tie-break. Each
// comes with the type as it resolves there; a NoFitError (when none fits)
// names what each GPU lacks.
func Order(want string, cands []Candidate) ([]Choice, error) {
	type fit struct {
		c       Choice
		running bool
		left    int
	}
	var fits []fit
	var why []string
	for _, c := range cands {
		g := c.GPU
		label := c.Host
		if label == "" {
			label = "the default host"
		}
		label += " " + g.Address.String()
		if g.Mechanism != MechanismVF {
			why = append(why, label+": no VF offers vGPU types (enable its VFs with kohaku_gpu_sriov; the vendor's vGPU manager must be loaded)")
			continue
		}
		t, ok := Resolve(want, g.Types)
		if !ok {
			why = append(why, label+": "+notOffered(g))
			continue
		}
		if err := g.Check(t); err != nil {
			why = append(why, label+": "+err.Error())
			continue
		}
		left := 0
		for _, o := range g.Offers() {
			if o.Type.ID == t.ID {
				left = o.Available
			}
		}
		free := g.Free(t, nil)
		if left == 0 || len(free) == 0 {
			why = append(why, label+": every instance of "+t.Name+" is taken")
			continue
		}
		fits = append(fits, fit{c: Choice{Host: c.Host, GPU: g.Address, VF: free[0].Address, Type: t}, running: len(g.Running()[t.ID]) > 0, left: left})
	}
	if len(fits) == 0 {
		if len(why) == 0 {
			why = []string{"no host has an SR-IOV GPU"}
		}
		return nil, &NoFitError{Want: want, Reasons: why}
	}
	slices.SortStableFunc(fits, func(a, b fit) int {
		if a.running != b.running {
			if a.running {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.left, b.left), cmp.Compare(a.c.Host, b.c.Host), a.c.GPU.Compare(b.c.GPU))
	})
	out := make([]Choice, len(fits))
	for i, f := range fits {
		out[i] = f.c
	}
	return out, nil
}

// notOffered says why a GPU does not list a type: it runs another one
// (the vendor then lists only that), or it never offered it.
func notOffered(g *GPU) string {
	for _, vf := range g.VFs {
		if vf.Current != 0 {
			return fmt.Sprintf("its VF %s runs %s, and a GPU runs one time-sliced vGPU type at a time, so it %s",
				vf.Address, typeLabel(g.TypeByID(vf.Current)), OffersText(g))
		}
	}
	return OffersText(g)
}

// OffersText says which types a GPU offers now, for an error.
func OffersText(g *GPU) string {
	var names []string
	for _, o := range g.Offers() {
		names = append(names, fmt.Sprintf("%s (%d left)", o.Type, o.Available))
	}
	if len(names) == 0 {
		return "offers no vGPU type now"
	}
	return "offers " + strings.Join(names, ", ")
}

// Take sets c's type on a free VF of c's GPU, re-reading the GPU first
// (what Order saw may be stale) and trying its free VFs in address order:
// a VF another apply set first (busy) is passed over for the next. The
// setting itself is the claim, atomic in the host's driver: of two
// applies writing the same VF, one gets it and the other EBUSY. It
// returns the VF set; an error when none could be (each VF's answer).
func Take(ctx context.Context, h Host, c Choice) (vfio.Address, error) {
	g, err := Inspect(ctx, h, c.GPU)
	if err != nil {
		return vfio.Address{}, err
	}
	if err := g.Check(c.Type); err != nil {
		return vfio.Address{}, err
	}
	var tried []string
	for _, vf := range g.Free(c.Type, nil) {
		err := SetType(ctx, h, vf.Address, c.Type)
		if err == nil {
			return vf.Address, nil
		}
		if !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.EINVAL) {
			return vfio.Address{}, err
		}
		tried = append(tried, fmt.Sprintf("%s: %v", vf.Address, err))
	}
	if len(tried) == 0 {
		return vfio.Address{}, fmt.Errorf("GPU %s has no free VF that offers %s now (another apply took the last one)", c.GPU, c.Type)
	}
	return vfio.Address{}, fmt.Errorf("no VF of GPU %s took %s (another apply took them first): %s", c.GPU, c.Type, strings.Join(tried, "; "))
}
