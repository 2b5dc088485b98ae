package virt

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// The Client is a claim.Host: claims are volumes of the host's claim pool.
var _ claim.Host = (*Client)(nil)

// claimLimit bounds what a claim volume may hold when read.
const claimLimit = 64 << 10

// ensureClaimPool returns the claim pool, defining it (autostarted) and
// starting it (building its directory) when the host has none yet. Two
// applies doing so at once both succeed: a define that fails because the
// other defined the pool first, or a start that fails because the other
// started it, is followed by a look that finds it there and running.
func ensureClaimPool(l *libvirt.Libvirt) (libvirt.StoragePool, error) {
	p, err := l.StoragePoolLookupByName(claim.Pool)
	if err != nil && !libvirtCode(err, libvirt.ErrNoStoragePool) {
		return p, err
	}
	if err != nil {
		doc, merr := (&libvirtxml.StoragePool{
			Type:   "dir",
			Name:   claim.Pool,
			Target: &libvirtxml.StoragePoolTarget{Path: claim.PoolPath, Permissions: &libvirtxml.StoragePoolTargetPermissions{Mode: "0700"}},
		}).Marshal()
		if merr != nil {
			return p, merr
		}
		var derr error
		if p, derr = l.StoragePoolDefineXML(doc, 0); derr != nil {
			if p, err = l.StoragePoolLookupByName(claim.Pool); err != nil {
				return p, fmt.Errorf("defining the claim pool %s at %s: %w", claim.Pool, claim.PoolPath, derr)
			}
		} else {
			_ = l.StoragePoolSetAutostart(p, 1) // a pool not autostarted is started again on first use
		}
	}
	active, err := l.StoragePoolIsActive(p)
	if err != nil {
		return p, err
	}
	if active == 0 {
		// WithBuild makes the directory first when it is not there, so
		// whichever apply starts the pool needs no build of its own.
		if serr := l.StoragePoolCreate(p, libvirt.StoragePoolCreateWithBuild); serr != nil {
			if active, err = l.StoragePoolIsActive(p); err == nil && active == 0 {
				// a build that refused the directory already there
				if l.StoragePoolCreate(p, 0) == nil {
					return p, nil
				}
				active, err = l.StoragePoolIsActive(p)
			}
			if err != nil || active == 0 {
				return p, fmt.Errorf("starting the claim pool %s: %w", claim.Pool, serr)
			}
		}
	}
	return p, nil
}

// CreateClaim creates the claim volume name holding content, atomically:
// the content is uploaded to a scratch volume first and the claim is
// created as its clone, so the claim appears with its content or not at
// all, and the clone fails when the name exists (libvirt checks and adds
// the name under the pool's lock). That failure wraps fs.ErrExist. The
// scratch volume is deleted either way, once the call is over.
func (c *Client) CreateClaim(ctx context.Context, name string, content []byte) error {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	scratch := "kohaku-scratch-" + hex.EncodeToString(b)
	var made atomic.Bool
	err := c.Call(ctx, "create claim "+name, func(l *libvirt.Libvirt) error {
		p, err := ensureClaimPool(l)
		if err != nil {
			return err
		}
		if _, err := l.StorageVolLookupByName(p, name); err == nil {
			return fmt.Errorf("claim volume %s: %w", name, fs.ErrExist)
		} else if !libvirtCode(err, libvirt.ErrNoStorageVol) {
			return err
		}
		vol := func(n string) (string, error) {
			return (&libvirtxml.StorageVolume{
				Name:     n,
				Capacity: &libvirtxml.StorageVolumeSize{Value: uint64(len(content)), Unit: "bytes"},
				Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "raw"}},
			}).Marshal()
		}
		doc, err := vol(scratch)
		if err != nil {
			return err
		}
		made.Store(true)
		sv, err := l.StorageVolCreateXML(p, doc, 0)
		if err != nil {
			return fmt.Errorf("creating the scratch volume %s: %w", scratch, err)
		}
		if err := l.StorageVolUpload(sv, bytes.NewReader(content), 0, uint64(len(content)), 0); err != nil {
			return fmt.Errorf("writing the claim to %s: %w", scratch, err)
		}
		if doc, err = vol(name); err != nil {
			return err
		}
		if _, err := l.StorageVolCreateXMLFrom(p, doc, sv, 0); err != nil {
			if volumeNameTaken(err) {
				return fmt.Errorf("claim volume %s: %w", name, fs.ErrExist)
			}
			return err
		}
		return nil
	})
	if made.Load() {
		// libvirtd may still hold the scratch volume for the upload's
		// stream it is tearing down; deleteUnused waits for it. A scratch
		// volume left behind is not a claim and nothing reads it.
		_ = c.deleteUnused(context.WithoutCancel(ctx), claim.Pool, scratch)
	}
	return err
}

// volumeNameTaken reports whether libvirt refused to create a volume
// because its name is in use in the pool: a volume create says so with
// its own code, a clone (storageVolCreateXMLFrom) with an internal error
// "storage volume name '...' already in use".
func volumeNameTaken(err error) bool {
	return libvirtCode(err, libvirt.ErrStorageVolExist) || strings.Contains(err.Error(), "already in use")
}

// claimReadWait bounds ReadClaim's wait for a claim another apply is
// cloning into place ("still being allocated").
const claimReadWait = 5 * time.Second

// ReadClaim returns a claim volume's content; one that (or whose pool)
// does not exist is an error wrapping fs.ErrNotExist.
func (c *Client) ReadClaim(ctx context.Context, name string) ([]byte, error) {
	deadline := time.Now().Add(claimReadWait)
	for {
		_, b, err := c.ReadVolume(ctx, claim.Pool, name, claimLimit)
		if errors.Is(err, ErrNotFound) || notFound(err) { // gone before, or while, it was read
			return nil, fmt.Errorf("claim volume %s: %w", name, fs.ErrNotExist)
		}
		if err == nil || !strings.Contains(err.Error(), "being allocated") || time.Now().After(deadline) {
			return b, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// DeleteClaim deletes a claim volume; one already gone is no error.
func (c *Client) DeleteClaim(ctx context.Context, name string) error {
	return c.RemoveVolume(ctx, claim.Pool, name)
}

// ListClaims lists the claim pool's volume names; none when the host has
// no claim pool yet.
func (c *Client) ListClaims(ctx context.Context) ([]string, error) {
	names, err := c.ListVolumeNames(ctx, claim.Pool)
	if errors.Is(err, ErrPoolNotFound) {
		return nil, nil
	}
	return names, err
}

// Domains lists every domain of the host, running or only defined, with
// the host PCI functions its XML has as hostdevs (a running domain's live
// XML, so a device attached by hand counts).
func (c *Client) Domains(ctx context.Context) ([]claim.Domain, error) {
	var out []claim.Domain
	err := c.Call(ctx, "list domains and their PCI hostdevs", func(l *libvirt.Libvirt) error {
		doms, _, err := l.ConnectListAllDomains(1, 0)
		if err != nil {
			return err
		}
		out = make([]claim.Domain, 0, len(doms))
		for _, d := range doms {
			doc, err := l.DomainGetXMLDesc(d, 0)
			if notFound(err) {
				continue // undefined while we listed
			}
			if err != nil {
				return fmt.Errorf("reading domain %s: %w", d.Name, err)
			}
			cd, err := claimDomain(doc)
			if err != nil {
				return fmt.Errorf("domain %s: %w", d.Name, err)
			}
			cd.Name, cd.UUID = d.Name, FormatUUID(d.UUID)
			out = append(out, cd)
		}
		return nil
	})
	return out, err
}

// claimDomain reads what a domain takes of its host from its XML: its PCI
// hostdevs and the CPUs its vCPUs are pinned to one to one.
func claimDomain(doc string) (claim.Domain, error) {
	var cd claim.Domain
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(doc); err != nil {
		return cd, fmt.Errorf("parsing domain XML: %w", err)
	}
	if dom.Devices != nil {
		for _, h := range dom.Devices.Hostdevs {
			if h.SubsysPCI == nil || h.SubsysPCI.Source == nil || h.SubsysPCI.Source.Address == nil {
				continue
			}
			a := h.SubsysPCI.Source.Address
			cd.Hostdevs = append(cd.Hostdevs, vfio.Address{Domain: uint16(pciField(a.Domain)), Bus: uint8(pciField(a.Bus)), Slot: uint8(pciField(a.Slot)), Function: uint8(pciField(a.Function))})
		}
	}
	if dom.CPUTune != nil {
		for _, p := range dom.CPUTune.VCPUPin {
			cpus, err := domain.ParseCPUSet(p.CPUSet)
			if err != nil {
				return cd, fmt.Errorf("vcpupin of vCPU %d: %w", p.VCPU, err)
			}
			if len(cpus) == 1 && !slices.Contains(cd.PinnedCPUs, cpus[0]) {
				cd.PinnedCPUs = append(cd.PinnedCPUs, cpus[0])
			}
		}
		slices.Sort(cd.PinnedCPUs)
	}
	return cd, nil
}
