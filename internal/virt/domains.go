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
