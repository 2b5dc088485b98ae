package mdev

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// Host is what managing mediated devices needs from a libvirt host.
// *virt.Client is one.
type Host interface {
	NodeDeviceXML(ctx context.Context, name string) (string, error)
	MdevNodeDevices(ctx context.Context) ([]string, error)
	MdevParentNodeDevices(ctx context.Context) ([]string, error)
	DefineNodeDevice(ctx context.Context, doc string) (string, error)
	StartNodeDevice(ctx context.Context, name string) error
	SetNodeDeviceAutostart(ctx context.Context, name string, on bool) error
	StopNodeDevice(ctx context.Context, name string) error
	UndefineNodeDevice(ctx context.Context, name string) error
	NodeDeviceState(ctx context.Context, name string) (hostapi.NodeDeviceState, error)
}

// Refusal is input the host cannot satisfy: Attribute names the input at
// fault ("parent", "type" or "uuid") so the message can be put on its line.
type Refusal struct {
	Attribute string
	Msg       string
}

func (r *Refusal) Error() string { return r.Msg }

// Manager manages the mediated devices of one host.
type Manager struct {
	Host Host
}

// Parents reads every node device that offers mediated device types.
func (m Manager) Parents(ctx context.Context) ([]Parent, error) {
	docs, err := m.Host.MdevParentNodeDevices(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Parent, 0, len(docs))
	for _, doc := range docs {
		p, err := ParseParent(doc)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Check refuses a spec the host cannot satisfy: a parent it does not have
// or that offers no mediated devices, a type the parent does not offer or
// has no instances of left, a UUID another mediated device has. Errors
// that are not a *Refusal are the host's.
func (m Manager) Check(ctx context.Context, s Spec) error {
	doc, err := m.Host.NodeDeviceXML(ctx, s.Parent)
	if errors.Is(err, hostapi.ErrNotFound) {
		return &Refusal{"parent", fmt.Sprintf("The host has no node device %s. %s", s.Parent, m.offeredElsewhere(ctx))}
	}
	if err != nil {
		return err
	}
	p, err := ParseParent(doc)
	if err != nil {
		return err
	}
	if len(p.Types) == 0 {
		return &Refusal{"parent", fmt.Sprintf("Node device %s offers no mediated device types. %s", s.Parent, m.offeredElsewhere(ctx))}
	}
	t := p.Lookup(s.Type)
	if t == nil {
		return &Refusal{"type", fmt.Sprintf("Parent %s offers no mediated device type %q; it offers %s.", s.Parent, s.Type, p.Offers())}
	}
	if t.Available == 0 {
		return &Refusal{"type", fmt.Sprintf("Parent %s has no instances of %s left (0 available); it offers %s. "+
			"Remove a mediated device of this type, or choose another type.", s.Parent, s.Type, p.Offers())}
	}
	if s.UUID != "" {
		d, err := m.Find(ctx, s.UUID)
		if err != nil {
			return err
		}
		if d != nil {
			return &Refusal{"uuid", fmt.Sprintf("A mediated device with uuid %s exists already (node device %s, "+
				"%s on %s): import it, or choose another uuid.", s.UUID, d.Name, d.Type, d.Parent)}
		}
	}
	return nil
}

// offeredElsewhere says which parents the host has, for a refusal.
func (m Manager) offeredElsewhere(ctx context.Context) string {
	ps, err := m.Parents(ctx)
	if err != nil {
		return fmt.Sprintf("(Listing the host's mediated device parents failed: %v.)", err)
	}
	if len(ps) == 0 {
		return "The host has no node device that offers mediated devices (no vGPU or other mdev parent driver is loaded)."
	}
	s := make([]string, 0, len(ps))
	for _, p := range ps {
		s = append(s, fmt.Sprintf("%s (%s)", p.Name, p.Offers()))
	}
	return "Parents that offer mediated devices: " + strings.Join(s, "; ") + "."
}

// CleanupTimeout bounds the undo of a failed create, which runs even when
// the operation's own deadline has passed.
var CleanupTimeout = time.Minute

// Create defines s persistently, marks it to start with the host and
// starts it. A step that fails undoes the steps before it: nothing is left
// defined.
func (m Manager) Create(ctx context.Context, s Spec) (Device, error) {
	doc, err := RenderDefinition(s)
	if err != nil {
		return Device{}, err
	}
	name, err := m.Host.DefineNodeDevice(ctx, doc)
	if err != nil {
		return Device{}, fmt.Errorf("defining mediated device %s (%s on %s): %w", s.UUID, s.Type, s.Parent, err)
	}
	undo := func(step string, cause error) (Device, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
		defer cancel()
		msg := "undefined it again"
		if err := m.Host.UndefineNodeDevice(cctx, name); err != nil {
			msg = fmt.Sprintf("undefining it again failed too (%v): remove node device %s by hand", err, name)
		}
		return Device{}, fmt.Errorf("%s mediated device %s (node device %s): %w; %s", step, s.UUID, name, cause, msg)
	}
	if err := m.Host.SetNodeDeviceAutostart(ctx, name, true); err != nil {
		return undo("marking to autostart", err)
	}
	if err := m.Host.StartNodeDevice(ctx, name); err != nil {
		return undo("starting", err)
	}
	d, err := m.settled(ctx, s.UUID)
	if err != nil {
		return Device{}, err
	}
	if d == nil {
		return Device{}, fmt.Errorf("mediated device %s (node device %s) was started but the host no longer lists it", s.UUID, name)
	}
	return *d, nil
}

// SettleTimeout bounds how long settled waits for libvirt to report a
// device it has just defined, marked and started as such.
var SettleTimeout = 10 * time.Second

// settled finds the device after a create or restore, waiting (within
// SettleTimeout) until libvirt reports it started, persistent and
// autostarted: libvirt learns of a start from udev a moment after the call
// returns, and a refresh in that moment would see a change that is not
// there. The calls that did it succeeded, so that is what it returns.
func (m Manager) settled(ctx context.Context, uuid string) (*Device, error) {
	deadline := time.Now().Add(SettleTimeout)
	for {
		d, err := m.Find(ctx, uuid)
		if err != nil || d == nil {
			return d, err
		}
		if d.Active && d.Persistent && d.Autostart || time.Now().After(deadline) {
			d.Active, d.Persistent, d.Autostart = true, true, true
			return d, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Restore brings a device found short of what Create makes back to it:
// defined again when only a transient device is left, marked to autostart,
// and started. It returns the device as found afterwards.
func (m Manager) Restore(ctx context.Context, s Spec, d Device) (Device, error) {
	if !d.Persistent {
		doc, err := RenderDefinition(s)
		if err != nil {
			return d, err
		}
		if _, err := m.Host.DefineNodeDevice(ctx, doc); err != nil {
			return d, fmt.Errorf("defining mediated device %s (node device %s) again: %w", d.UUID, d.Name, err)
		}
	}
	if !d.Persistent || !d.Autostart {
		if err := m.Host.SetNodeDeviceAutostart(ctx, d.Name, true); err != nil {
			return d, fmt.Errorf("marking mediated device %s (node device %s) to autostart: %w", d.UUID, d.Name, err)
		}
	}
	if !d.Active {
		if err := m.Host.StartNodeDevice(ctx, d.Name); err != nil {
			return d, fmt.Errorf("starting mediated device %s (node device %s): %w", d.UUID, d.Name, err)
		}
	}
	found, err := m.settled(ctx, d.UUID)
	if err != nil {
		return d, err
	}
	if found == nil {
		return d, fmt.Errorf("mediated device %s (node device %s) is no longer on the host", d.UUID, d.Name)
	}
	return *found, nil
}

// Find returns the mediated device with the given UUID, with its state, or
// nil when the host has none.
func (m Manager) Find(ctx context.Context, uuid string) (*Device, error) {
	docs, err := m.Host.MdevNodeDevices(ctx)
	if err != nil {
		return nil, err
	}
	uuid = strings.ToLower(uuid)
	for _, doc := range docs {
		d, err := ParseDevice(doc)
		if err != nil {
			return nil, err
		}
		if d.UUID != uuid {
			continue
		}
		st, err := m.Host.NodeDeviceState(ctx, d.Name)
		if errors.Is(err, hostapi.ErrNotFound) {
			return nil, nil // removed since the listing
		}
		if err != nil {
			return nil, err
		}
		d.Active, d.Persistent, d.Autostart = st.Active, st.Persistent, st.Autostart
		return &d, nil
	}
	return nil, nil
}

// Remove stops d when it is active and removes its definition when it is
// persistent; its parent is left as it was. A device already gone is not
// an error.
func (m Manager) Remove(ctx context.Context, d Device) error {
	if d.Active {
		if err := m.Host.StopNodeDevice(ctx, d.Name); err != nil && !errors.Is(err, hostapi.ErrNotFound) {
			return fmt.Errorf("stopping mediated device %s (node device %s): %w", d.UUID, d.Name, err)
		}
	}
	if d.Persistent {
		if err := m.Host.UndefineNodeDevice(ctx, d.Name); err != nil && !errors.Is(err, hostapi.ErrNotFound) {
			return fmt.Errorf("undefining mediated device %s (node device %s): %w", d.UUID, d.Name, err)
		}
	}
	return nil
}
