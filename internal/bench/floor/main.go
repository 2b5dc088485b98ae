// Command floor is the libvirt floor of the end-to-end benchmark: the libvirt
// calls that N kohaku_seed + kohaku_vm pairs need at the least, made directly
// over one connection with a fixed concurrency, and nothing else. The
// harness (internal/bench/e2e) runs it beside terraform apply / plan /
// destroy of the same N; what kohaku takes beyond this floor plus
// Terraform's own floor is the provider's overhead.
//
// Per pair, timed:
//
//	create:  seed volume create + upload of a rendered ISO, qcow2 overlay
//	         create on the base image, domain define (validated)
//	read:    seed volume lookup + info + download (what a refresh compares),
//	         domain inactive XML + state
//	delete:  domain undefine, overlay delete, seed delete
//
// Pool handles, the base image's path, the ISOs and the domain XML are made
// before the clock starts: they are fixed costs or provider-side CPU work.
// It prints one JSON object. Everything it made is deleted before it exits,
// and the harness sweeps its name prefix afterwards as well.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// Result is what floor prints; the harness decodes it.
type Result struct {
	N           int     `json:"n"`
	Concurrency int     `json:"concurrency"`
	CreateS     float64 `json:"create_s"`
	ReadS       float64 `json:"read_s"`
	DeleteS     float64 `json:"delete_s"`
	CreateRPCs  int64   `json:"create_rpcs"`
	ReadRPCs    int64   `json:"read_rpcs"`
	DeleteRPCs  int64   `json:"delete_rpcs"`
	ISOBytes    int     `json:"iso_bytes"`
}

type pair struct {
	name, seedName, overlayName string
	iso                         []byte
	xml                         string
	seedVol, overlayVol         *libvirt.StorageVol
	dom                         *libvirt.Domain
}

// floor is one run's connection and what its phases share: the pool of
// the seeds and overlays, and the base image the overlays are made on.
type floor struct {
	c          *virt.Client
	sp, bp     libvirt.StoragePool
	basePath   string
	baseFormat string
	baseCap    uint64
}

func main() {
	var (
		uri         = flag.String("uri", envOr("KOHAKU_URI", "qemu:///system"), "libvirt URI")
		pool        = flag.String("pool", envOr("KOHAKU_TEST_POOL", "kohaku-acc"), "pool for seeds and overlays")
		imagePool   = flag.String("image-pool", envOr("KOHAKU_TEST_IMAGE_POOL", "kohaku-images"), "pool of the base image")
		base        = flag.String("base", envOr("KOHAKU_TEST_BASE_VOLUME", "rootfs.qcow2"), "base image volume")
		kernel      = flag.String("kernel", os.Getenv("KOHAKU_TEST_KERNEL"), "kernel for direct boot")
		initrd      = flag.String("initrd", os.Getenv("KOHAKU_TEST_INITRD"), "initrd for direct boot")
		prefix      = flag.String("prefix", fmt.Sprintf("kohaku-floor-%d-", os.Getpid()), "name prefix of everything made")
		n           = flag.Int("n", 10, "seed + VM pairs")
		concurrency = flag.Int("concurrency", 10, "calls in flight (terraform -parallelism)")
		outPath     = flag.String("out", "", "write the JSON result here instead of stdout")
	)
	flag.Parse()
	if *kernel == "" || *initrd == "" {
		fail(fmt.Errorf("-kernel and -initrd (or KOHAKU_TEST_KERNEL/INITRD) are required"))
	}
	ctx := context.Background()
	c, err := virt.New(virt.Settings{URI: *uri})
	if err != nil {
		fail(err)
	}
	defer c.Close()

	// Fixed costs, untimed: pool handles, the base image, the payloads.
	f := &floor{c: c}
	if err := f.prepare(ctx, *pool, *imagePool, *base); err != nil {
		fail(err)
	}
	pairs := makePairs(*n, *prefix, *pool, *kernel, *initrd)
	if err := f.baseInfo(ctx, *base); err != nil {
		fail(err)
	}

	out := Result{N: *n, Concurrency: *concurrency, ISOBytes: len(pairs[0].iso)}
	cleanupNeeded := true
	defer func() {
		if cleanupNeeded {
			cleanup(c, f.sp, pairs)
		}
	}()
	for _, ph := range []struct {
		name string
		fn   func(*libvirt.Libvirt, *pair) error
		secs *float64
		rpcs *int64
	}{
		{"create", f.create, &out.CreateS, &out.CreateRPCs},
		{"read", f.read, &out.ReadS, &out.ReadRPCs},
		{"delete", f.del, &out.DeleteS, &out.DeleteRPCs},
	} {
		if err := f.phase(ctx, pairs, *concurrency, ph.name, ph.fn, ph.secs, ph.rpcs); err != nil {
			cleanup(c, f.sp, pairs)
			cleanupNeeded = false
			fail(err)
		}
	}
	cleanupNeeded = false
	writeResult(out, *outPath)
}

// prepare looks up the pools and the base image's path and format.
func (f *floor) prepare(ctx context.Context, pool, imagePool, base string) error {
	return f.c.Call(ctx, "prepare", func(l *libvirt.Libvirt) error {
		var err error
		if f.sp, err = l.StoragePoolLookupByName(pool); err != nil {
			return err
		}
		if f.bp, err = l.StoragePoolLookupByName(imagePool); err != nil {
			return err
		}
		bv, err := l.StorageVolLookupByName(f.bp, base)
		if err != nil {
			return err
		}
		doc, err := l.StorageVolGetXMLDesc(bv, 0)
		if err != nil {
			return err
		}
		var x libvirtxml.StorageVolume
		if err := x.Unmarshal(doc); err != nil {
			return err
		}
		f.basePath, f.baseFormat = x.Target.Path, "qcow2"
		if x.Target.Format != nil && x.Target.Format.Type != "" {
			f.baseFormat = x.Target.Format.Type
		}
		return nil
	})
}

// makePairs renders each pair's seed ISO and domain XML.
func makePairs(n int, prefix, pool, kernel, initrd string) []*pair {
	pairs := make([]*pair, n)
	for i := range pairs {
		p := &pair{name: fmt.Sprintf("%s%d", prefix, i)}
		p.seedName, p.overlayName = p.name+"-seed.iso", p.name+"-root.qcow2"
		res, err := seed.Render(&seed.Spec{
			Name:           p.name,
			Hostname:       fmt.Sprintf("bench-%d", i),
			User:           &seed.User{Name: "kohaku", SSHAuthorizedKeys: []string{sshKey}},
			QEMUGuestAgent: true,
			Network:        []seed.NIC{{Addresses: []string{"10.0.2.15/24"}, Gateway4: "10.0.2.2", Nameservers: []string{"10.0.2.3"}}},
		})
		if err != nil {
			fail(err)
		}
		p.iso = res.ISO
		spec := domain.Spec{
			Name: p.name, Type: domain.TypeQEMU, VCPU: 1, MemoryMiB: 128,
			Kernel: kernel, Initrd: initrd, Cmdline: "root=/dev/vda rw console=ttyS0",
			Disk: &domain.Disk{Source: domain.Source{Pool: pool, Volume: p.overlayName}, Format: domain.DiskQCOW2},
			Seed: &domain.Seed{Source: domain.Source{Pool: pool, Volume: p.seedName}},
			NICs: []domain.NIC{{Type: domain.NICUser, MAC: res.MACs[0]}},
		}
		spec.Owner.Volumes = []domain.VolumeRef{{Pool: pool, Volume: p.overlayName}}
		if p.xml, err = domain.Marshal(spec); err != nil {
			fail(err)
		}
		pairs[i] = p
	}
	return pairs
}

// baseInfo reads the base image's capacity, the overlays' capacity.
func (f *floor) baseInfo(ctx context.Context, base string) error {
	return f.c.Call(ctx, "base info", func(l *libvirt.Libvirt) error {
		bv, err := l.StorageVolLookupByName(f.bp, base)
		if err != nil {
			return err
		}
		_, f.baseCap, _, err = l.StorageVolGetInfo(bv)
		return err
	})
}

func (f *floor) overlayXML(name string, capacity uint64) (string, error) {
	return (&libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Value: capacity, Unit: "bytes"},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
		BackingStore: &libvirtxml.StorageVolumeBackingStore{
			Path: f.basePath, Format: &libvirtxml.StorageVolumeTargetFormat{Type: f.baseFormat},
		},
	}).Marshal()
}

// create is a pair's create: seed volume and upload, overlay, domain.
func (f *floor) create(l *libvirt.Libvirt, p *pair) error {
	doc, err := (&libvirtxml.StorageVolume{
		Name:     p.seedName,
		Capacity: &libvirtxml.StorageVolumeSize{Value: uint64(len(p.iso)), Unit: "bytes"},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "raw"}},
	}).Marshal()
	if err != nil {
		return err
	}
	sv, err := l.StorageVolCreateXML(f.sp, doc, 0)
	if err != nil {
		return err
	}
	p.seedVol = &sv
	if err := l.StorageVolUpload(sv, bytes.NewReader(p.iso), 0, uint64(len(p.iso)), 0); err != nil {
		return err
	}
	doc, err = f.overlayXML(p.overlayName, f.baseCap)
	if err != nil {
		return err
	}
	ov, err := l.StorageVolCreateXML(f.sp, doc, 0)
	if err != nil {
		return err
	}
	p.overlayVol = &ov
	d, err := l.DomainDefineXMLFlags(p.xml, libvirt.DomainDefineValidate)
	if err != nil {
		return err
	}
	p.dom = &d
	return nil
}

// read is a pair's refresh: the seed's download and the domain's XML and
// state.
func (f *floor) read(l *libvirt.Libvirt, p *pair) error {
	v, err := l.StorageVolLookupByName(f.sp, p.seedName)
	if err != nil {
		return err
	}
	_, capacity, _, err := l.StorageVolGetInfo(v)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := l.StorageVolDownload(v, &buf, 0, capacity, 0); err != nil {
		return err
	}
	if buf.Len() != len(p.iso) {
		return fmt.Errorf("%s: downloaded %d bytes, uploaded %d", p.seedName, buf.Len(), len(p.iso))
	}
	if _, err := l.DomainGetXMLDesc(*p.dom, libvirt.DomainXMLInactive); err != nil {
		return err
	}
	_, _, err = l.DomainGetState(*p.dom, 0)
	return err
}

// del is a pair's delete: domain, overlay, seed.
func (f *floor) del(l *libvirt.Libvirt, p *pair) error {
	if err := l.DomainUndefineFlags(*p.dom, libvirt.DomainUndefineNvram|libvirt.DomainUndefineManagedSave|
		libvirt.DomainUndefineSnapshotsMetadata|libvirt.DomainUndefineCheckpointsMetadata); err != nil {
		return err
	}
	p.dom = nil
	if err := l.StorageVolDelete(*p.overlayVol, 0); err != nil {
		return err
	}
	p.overlayVol = nil
	if err := l.StorageVolDelete(*p.seedVol, 0); err != nil {
		return err
	}
	p.seedVol = nil
	return nil
}

// phase times fn over every pair and counts its RPCs.
func (f *floor) phase(ctx context.Context, pairs []*pair, concurrency int, name string, fn func(*libvirt.Libvirt, *pair) error, secs *float64, rpcs *int64) error {
	before := f.c.RPCs()
	start := time.Now()
	if err := each(ctx, f.c, name, pairs, concurrency, fn); err != nil {
		return err
	}
	*secs = time.Since(start).Seconds()
	*rpcs = f.c.RPCs() - before
	return nil
}

// writeResult prints the result as one JSON line, to path when set.
func writeResult(out Result, path string) {
	raw, _ := json.Marshal(out)
	raw = append(raw, '\n')
	if path != "" {
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			fail(err)
		}
		return
	}
	os.Stdout.Write(raw)
}

// each runs fn for every pair with at most conc in flight, each as one
// Client.Call (one bounded call on the shared connection, as the provider
// does). The first error wins.
func each(ctx context.Context, c *virt.Client, op string, pairs []*pair, conc int, fn func(*libvirt.Libvirt, *pair) error) error {
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, p := range pairs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := c.Call(ctx, op+" "+p.name, func(l *libvirt.Libvirt) error { return fn(l, p) })
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// cleanup removes what a failed run left, best effort.
func cleanup(c *virt.Client, sp libvirt.StoragePool, pairs []*pair) {
	ctx := context.Background()
	for _, p := range pairs {
		if p == nil {
			continue
		}
		c.Call(ctx, "cleanup "+p.name, func(l *libvirt.Libvirt) error { //nolint:errcheck // best effort
			if d, err := l.DomainLookupByName(p.name); err == nil {
				l.DomainDestroy(d)                                                                      //nolint:errcheck // best effort
				l.DomainUndefineFlags(d, libvirt.DomainUndefineNvram|libvirt.DomainUndefineManagedSave) //nolint:errcheck // best effort
			}
			for _, v := range []string{p.overlayName, p.seedName} {
				if vol, err := l.StorageVolLookupByName(sp, v); err == nil {
					l.StorageVolDelete(vol, 0) //nolint:errcheck // best effort
				}
			}
			return nil
		})
	}
}

const sshKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJfaz/mJ/6BFYscLuJLZ6JlVggOhzDZ+dRREhnzJc1sZ bench@kohaku"

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "floor:", err)
	os.Exit(1)
}
