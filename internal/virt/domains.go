package virt

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// domainHandle builds the go-libvirt domain handle for r.
func domainHandle(r DomainRef) (libvirt.Domain, error) {
	u, err := ParseUUID(r.UUID)
	if err != nil {
		return libvirt.Domain{}, err
	}
	return libvirt.Domain{Name: r.Name, UUID: u, ID: -1}, nil
}

// ParseUUID parses the 8-4-4-4-12 form libvirt prints.
func ParseUUID(s string) (libvirt.UUID, error) {
	var u libvirt.UUID
	raw := strings.ReplaceAll(s, "-", "")
	if len(raw) != 32 || len(s) != 36 {
		return u, fmt.Errorf("%q is not a UUID in 8-4-4-4-12 hex form", s)
	}
	b, err := hex.DecodeString(raw)
	if err != nil {
		return u, fmt.Errorf("%q is not a UUID in 8-4-4-4-12 hex form", s)
	}
	copy(u[:], b)
	return u, nil
}

// FormatUUID prints a UUID in lower-case 8-4-4-4-12 form.
func FormatUUID(u libvirt.UUID) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// IsUUID reports whether s looks like a UUID (so import can tell names from UUIDs).
func IsUUID(s string) bool {
	_, err := ParseUUID(s)
	return err == nil
}

func libvirtCode(err error, code libvirt.ErrorNumber) bool {
	var e libvirt.Error
	return errors.As(err, &e) && e.Code == uint32(code)
}

// ReadDomain returns a domain's definition, run state and autostart flag in
// three libvirt calls (no lookup: the UUID addresses the domain). A domain that
// does not exist yields an error wrapping ErrDomainNotFound.
func (c *Client) ReadDomain(ctx context.Context, ref DomainRef) (*DomainStatus, error) {
	dom, err := domainHandle(ref)
	if err != nil {
		return nil, err
	}
	out := &DomainStatus{DomainRef: ref}
	err = c.Call(ctx, "read domain "+ref.String(), func(l *libvirt.Libvirt) error {
		doc, err := l.DomainGetXMLDesc(dom, libvirt.DomainXMLInactive)
		if err != nil {
			return err
		}
		state, _, err := l.DomainGetState(dom, 0)
		if err != nil {
			return err
		}
		auto, err := l.DomainGetAutostart(dom)
		if err != nil {
			return err
		}
		out.XML, out.State, out.Autostart = doc, DomainState(state), auto == 1
		out.Active = out.State != DomainState(libvirt.DomainShutoff) && out.State != DomainState(libvirt.DomainNostate)
		return nil
	})
	if libvirtCode(err, libvirt.ErrNoDomain) {
		return nil, fmt.Errorf("domain %s: %w", ref, ErrDomainNotFound)
	}
	return out, err
}

// LookupDomain finds a domain by name or by UUID.
func (c *Client) LookupDomain(ctx context.Context, nameOrUUID string) (DomainRef, error) {
	var ref DomainRef
	err := c.Call(ctx, "look up domain "+nameOrUUID, func(l *libvirt.Libvirt) error {
		var d libvirt.Domain
		var err error
		if u, perr := ParseUUID(nameOrUUID); perr == nil {
			d, err = l.DomainLookupByUUID(u)
		} else {
			d, err = l.DomainLookupByName(nameOrUUID)
		}
		if err != nil {
			return err
		}
		ref = DomainRef{UUID: FormatUUID(d.UUID), Name: d.Name}
		return nil
	})
	if libvirtCode(err, libvirt.ErrNoDomain) {
		return ref, fmt.Errorf("no domain named or with UUID %q: %w", nameOrUUID, ErrDomainNotFound)
	}
	return ref, err
}

// DefineDomain defines (or, for a UUID that exists, redefines) a persistent
// domain from XML, validating it against libvirt's schema first.
func (c *Client) DefineDomain(ctx context.Context, name, xml string) (DomainRef, error) {
	var ref DomainRef
	err := c.Call(ctx, "define domain "+name, func(l *libvirt.Libvirt) error {
		d, err := l.DomainDefineXMLFlags(xml, libvirt.DomainDefineValidate)
		if err != nil {
			return err
		}
		ref = DomainRef{UUID: FormatUUID(d.UUID), Name: d.Name}
		return nil
	})
	return ref, err
}

// StartDomain starts a defined domain; one that is already running is fine.
func (c *Client) StartDomain(ctx context.Context, ref DomainRef) error {
	dom, err := domainHandle(ref)
	if err != nil {
		return err
	}
	return c.Call(ctx, "start domain "+ref.String(), func(l *libvirt.Libvirt) error {
		err := l.DomainCreate(dom)
		if libvirtCode(err, libvirt.ErrOperationInvalid) {
			if st, _, serr := l.DomainGetState(dom, 0); serr == nil && libvirt.DomainState(st) != libvirt.DomainShutoff {
				return nil
			}
		}
		return err
	})
}

// SetAutostart turns starting the domain with the host on or off.
func (c *Client) SetAutostart(ctx context.Context, ref DomainRef, on bool) error {
	dom, err := domainHandle(ref)
	if err != nil {
		return err
	}
	v := int32(0)
	if on {
		v = 1
	}
	return c.Call(ctx, fmt.Sprintf("set autostart=%t on domain %s", on, ref), func(l *libvirt.Libvirt) error {
		return l.DomainSetAutostart(dom, v)
	})
}

// stopPoll is how often StopDomain checks whether the guest has powered off.
const stopPoll = 250 * time.Millisecond

// stopResend is how often StopDomain repeats its shutdown request while it
// waits: a request that reaches a guest before it listens (still booting,
// systemd-logind not up yet) is lost, and one sent again once it listens is
// honoured instead of the guest being forced off at the end of the grace.
// A guest already shutting down ignores the repeats.
const stopResend = 5 * time.Second

// StopDomain asks the guest to power off (libvirt's shutdown: the guest
// agent when it answers, else ACPI), repeating the request every stopResend,
// waits up to grace for it, then forces it off. The wait also ends with ctx, a little before its
// deadline so the forced stop still fits. A domain that is gone or already off
// is not an error.
func (c *Client) StopDomain(ctx context.Context, ref DomainRef, grace time.Duration) (StopResult, error) {
	dom, err := domainHandle(ref)
	if err != nil {
		return StopNotRunning, err
	}
	state := func() (libvirt.DomainState, error) {
		var st int32
		err := c.Call(ctx, "read state of domain "+ref.String(), func(l *libvirt.Libvirt) error {
			var err error
			st, _, err = l.DomainGetState(dom, 0)
			return err
		})
		return libvirt.DomainState(st), err
	}
	st, err := state()
	if libvirtCode(err, libvirt.ErrNoDomain) {
		return StopNotRunning, nil
	}
	if err != nil {
		return StopNotRunning, err
	}
	if st == libvirt.DomainShutoff {
		return StopNotRunning, nil
	}
	if grace > 0 && st == libvirt.DomainRunning {
		end := time.Now().Add(grace)
		if dl, ok := ctx.Deadline(); ok && dl.Add(-StopForceMargin).Before(end) {
			end = dl.Add(-StopForceMargin)
		}
		ask := func() error {
			return c.Call(ctx, "shut down domain "+ref.String(), func(l *libvirt.Libvirt) error {
				return l.DomainShutdown(dom)
			})
		}
		if err := ask(); err == nil {
			asked := time.Now()
			for time.Now().Before(end) {
				select {
				case <-ctx.Done():
					return StopNotRunning, fmt.Errorf("waiting for domain %s to shut down: %w", ref, ctx.Err())
				case <-time.After(stopPoll):
				}
				st, err := state()
				if libvirtCode(err, libvirt.ErrNoDomain) || (err == nil && st == libvirt.DomainShutoff) {
					return StopGraceful, nil
				}
				if time.Since(asked) >= stopResend && err == nil && st == libvirt.DomainRunning {
					ask() //nolint:errcheck // the first request's answer decided; a repeat may race the power-off
					asked = time.Now()
				}
			}
		}
		// A guest that ignores ACPI (still booting, no listener) is forced off.
	}
	err = c.Call(ctx, "force off domain "+ref.String(), func(l *libvirt.Libvirt) error {
		err := l.DomainDestroy(dom)
		if libvirtCode(err, libvirt.ErrOperationInvalid) || libvirtCode(err, libvirt.ErrNoDomain) {
			return nil // it stopped (or vanished) on its own meanwhile
		}
		return err
	})
	if err != nil {
		return StopNotRunning, err
	}
	return StopForced, nil
}

// UndefineDomain removes a domain's definition together with its UEFI NVRAM
// file, managed save image and snapshot and checkpoint metadata. The domain
// must be shut off. A domain that is already gone is not an error.
func (c *Client) UndefineDomain(ctx context.Context, ref DomainRef) error {
	dom, err := domainHandle(ref)
	if err != nil {
		return err
	}
	return c.Call(ctx, "undefine domain "+ref.String(), func(l *libvirt.Libvirt) error {
		err := l.DomainUndefineFlags(dom, libvirt.DomainUndefineNvram|libvirt.DomainUndefineManagedSave|
			libvirt.DomainUndefineSnapshotsMetadata|libvirt.DomainUndefineCheckpointsMetadata)
		if libvirtCode(err, libvirt.ErrNoDomain) {
			return nil
		}
		return err
	})
}

// ListDomains lists every domain of the host, active or not, sorted by name.
func (c *Client) ListDomains(ctx context.Context) ([]DomainSummary, error) {
	var out []DomainSummary
	err := c.Call(ctx, "list domains", func(l *libvirt.Libvirt) error {
		doms, _, err := l.ConnectListAllDomains(1, 0)
		if err != nil {
			return err
		}
		for _, d := range doms {
			out = append(out, DomainSummary{DomainRef: DomainRef{UUID: FormatUUID(d.UUID), Name: d.Name}, Active: d.ID > 0})
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// lookupVolume finds a volume in a pool, saying which volumes the pool has
// when it is missing.
func lookupVolume(l *libvirt.Libvirt, pool libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	v, err := l.StorageVolLookupByName(pool, name)
	if err == nil || !libvirtCode(err, libvirt.ErrNoStorageVol) {
		return v, err
	}
	have := "it is empty"
	if vols, _, lerr := l.StoragePoolListAllVolumes(pool, 1, 0); lerr == nil && len(vols) > 0 {
		names := make([]string, 0, len(vols))
		for _, x := range vols {
			names = append(names, x.Name)
		}
		sort.Strings(names)
		if len(names) > 20 {
			names = append(names[:20], "...")
		}
		have = "it has " + strings.Join(names, ", ")
	}
	return v, fmt.Errorf("pool %q has no volume %q (%s): %w", pool.Name, name, have, ErrVolumeNotFound)
}

func volumeDetail(l *libvirt.Libvirt, pool string, v libvirt.StorageVol) (*VolumeDetail, error) {
	doc, err := l.StorageVolGetXMLDesc(v, 0)
	if err != nil {
		return nil, err
	}
	var x libvirtxml.StorageVolume
	if err := x.Unmarshal(doc); err != nil {
		return nil, fmt.Errorf("parse the XML of volume %s/%s: %w", pool, v.Name, err)
	}
	d := &VolumeDetail{Pool: pool, Name: v.Name}
	if x.Target != nil {
		d.Path = x.Target.Path
		if x.Target.Format != nil {
			d.Format = x.Target.Format.Type
		}
	}
	if x.Capacity != nil {
		d.CapacityBytes = int64(sizeInBytes(x.Capacity))
	}
	if x.BackingStore != nil {
		d.BackingPath = x.BackingStore.Path
	}
	return d, nil
}

func sizeInBytes(s *libvirtxml.StorageVolumeSize) uint64 { return s.Value * unitBytes(s.Unit) }

// VolumeInfo describes a volume: path, format, capacity and backing file.
func (c *Client) VolumeInfo(ctx context.Context, pool, name string) (*VolumeDetail, error) {
	var out *VolumeDetail
	err := c.Call(ctx, fmt.Sprintf("look up volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		v, err := lookupVolume(l, p, name)
		if err != nil {
			return err
		}
		out, err = volumeDetail(l, pool, v)
		return err
	})
	return out, err
}

// VolumeByPath finds the pool and name of the volume at a host path.
func (c *Client) VolumeByPath(ctx context.Context, path string) (pool, name string, err error) {
	err = c.Call(ctx, "look up volume at "+path, func(l *libvirt.Libvirt) error {
		v, err := l.StorageVolLookupByPath(path)
		if libvirtCode(err, libvirt.ErrNoStorageVol) {
			return fmt.Errorf("no storage pool holds %s: %w", path, ErrVolumeNotFound)
		}
		if err != nil {
			return err
		}
		p, err := l.StoragePoolLookupByVolume(v)
		if err != nil {
			return err
		}
		pool, name = p.Name, v.Name
		return nil
	})
	return pool, name, err
}

// CreateOverlay creates a qcow2 volume name in pool backed by the volume
// basePool/baseName, so the base stays untouched. capacity is the virtual size
// in bytes; 0 means the base's size, and a smaller one is refused (qcow2
// overlays cannot shrink their backing image).
func (c *Client) CreateOverlay(ctx context.Context, pool, name, basePool, baseName string, capacity int64) (*VolumeDetail, error) {
	var out *VolumeDetail
	err := c.Call(ctx, fmt.Sprintf("create overlay volume %s/%s on %s/%s", pool, name, basePool, baseName), func(l *libvirt.Libvirt) error {
		bp, err := poolByName(l, basePool)
		if err != nil {
			return err
		}
		bv, err := lookupVolume(l, bp, baseName)
		if err != nil {
			return err
		}
		base, err := volumeDetail(l, basePool, bv)
		if err != nil {
			return err
		}
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		if err := volumeAbsent(l, p, pool, name); err != nil {
			return err
		}
		if capacity == 0 {
			capacity = base.CapacityBytes
		}
		if capacity < base.CapacityBytes {
			return fmt.Errorf("the overlay would be %d bytes, smaller than its base %s/%s (%d bytes); a qcow2 "+
				"overlay cannot be smaller than its backing image: leave size_gib unset or make it at least %d", capacity, basePool, baseName, base.CapacityBytes, (base.CapacityBytes+(1<<30)-1)>>30)
		}
		format := base.Format
		if format == "" {
			format = "raw"
		}
		out, err = createVolumeXML(l, p, pool, &libvirtxml.StorageVolume{
			Name:     name,
			Capacity: &libvirtxml.StorageVolumeSize{Value: uint64(capacity), Unit: "bytes"},
			Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
			BackingStore: &libvirtxml.StorageVolumeBackingStore{
				Path:   base.Path,
				Format: &libvirtxml.StorageVolumeTargetFormat{Type: format},
			},
		})
		return err
	})
	return out, err
}

// volumeAbsent is nil when pool p has no volume name; one that exists is an
// *OverlayExistsError (Kohaku never takes over a volume it did not make).
func volumeAbsent(l *libvirt.Libvirt, p libvirt.StoragePool, pool, name string) error {
	if _, err := l.StorageVolLookupByName(p, name); err == nil {
		return &OverlayExistsError{Pool: pool, Name: name}
	} else if !libvirtCode(err, libvirt.ErrNoStorageVol) {
		return err
	}
	return nil
}

// createVolumeXML creates vol in pool p and returns what libvirt made.
func createVolumeXML(l *libvirt.Libvirt, p libvirt.StoragePool, pool string, vol *libvirtxml.StorageVolume) (*VolumeDetail, error) {
	doc, err := vol.Marshal()
	if err != nil {
		return nil, err
	}
	v, err := l.StorageVolCreateXML(p, doc, 0)
	if err != nil {
		return nil, err
	}
	return volumeDetail(l, pool, v)
}

// RemoveVolume deletes a volume; one that (or whose pool) is already gone is
// not an error.
func (c *Client) RemoveVolume(ctx context.Context, pool, name string) error {
	return c.Call(ctx, fmt.Sprintf("delete volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := l.StoragePoolLookupByName(pool)
		if libvirtCode(err, libvirt.ErrNoStoragePool) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := l.StorageVolLookupByName(p, name)
		if libvirtCode(err, libvirt.ErrNoStorageVol) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := l.StorageVolDelete(v, 0); err != nil && !libvirtCode(err, libvirt.ErrNoStorageVol) {
			return err
		}
		return nil
	})
}

// VolumeExists reports whether pool has a volume name. A missing pool is false.
func (c *Client) VolumeExists(ctx context.Context, pool, name string) (bool, error) {
	var ok bool
	err := c.Call(ctx, fmt.Sprintf("look up volume %s/%s", pool, name), func(l *libvirt.Libvirt) error {
		p, err := l.StoragePoolLookupByName(pool)
		if libvirtCode(err, libvirt.ErrNoStoragePool) {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = l.StorageVolLookupByName(p, name)
		if libvirtCode(err, libvirt.ErrNoStorageVol) {
			return nil
		}
		ok = err == nil
		return err
	})
	return ok, err
}

// ListVolumeNames lists the volume names of a pool, sorted.
func (c *Client) ListVolumeNames(ctx context.Context, pool string) ([]string, error) {
	var names []string
	err := c.Call(ctx, "list volumes of pool "+pool, func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, pool)
		if err != nil {
			return err
		}
		vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
		if err != nil {
			return err
		}
		for _, v := range vols {
			names = append(names, v.Name)
		}
		return nil
	})
	sort.Strings(names)
	return names, err
}
