package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// quarantineSuffix ends the name of a device's quarantine marker:
// kohaku-claim-0000_3b_00_0.quarantine.
const quarantineSuffix = ".quarantine"

// QuarantineName is the quarantine marker volume of a device.
func QuarantineName(a vfio.Address) string { return VolumeName(a) + quarantineSuffix }

// Marker is a quarantine marker's content: why a device is held back,
// since when, and which VM gave it back.
type Marker struct {
	Version int       `json:"version"`
	Device  string    `json:"device"`
	Reason  string    `json:"reason"`
	Since   time.Time `json:"since"`
	From    Holder    `json:"from"`
}

// Address is the quarantined device's address.
func (m *Marker) Address() vfio.Address {
	a, _ := vfio.ParseAddress(m.Device)
	return a
}

// String says why the device is held back, for capacity's holder column.
func (m *Marker) String() string {
	s := m.Reason
	if m.From.VM != "" {
		s += fmt.Sprintf(" (given back by %s)", m.From)
	}
	return s + " since " + m.Since.Format(time.RFC3339)
}

// ClearHint tells an operator how to return a quarantined device.
func ClearHint(a vfio.Address) string {
	return fmt.Sprintf("check the GPU, then return it with the kohaku_gpu_reset action (address %q): a reset that "+
		"succeeds clears the quarantine. Or delete the marker by hand: virsh vol-delete --pool %s %s", a, Pool, QuarantineName(a))
}

// QuarantinedError refuses a device held back after its last VM.
type QuarantinedError struct {
	Device vfio.Address
	Marker Marker
}

func (e *QuarantinedError) Error() string {
	return fmt.Sprintf("%s is quarantined: %s; ask for another GPU, or have an operator %s", e.Device, e.Marker.String(), ClearHint(e.Device))
}

// Quarantine holds dev back until an operator clears it: it creates dev's
// marker, saying why and which VM gave it back. The caller is to call it
// BEFORE it releases its claim on dev (see the package doc). A marker that
// is there already is kept as it is (the first reason stands), no error.
func (c *Claimer) Quarantine(ctx context.Context, dev vfio.Address, reason string, from Holder) error {
	m := Marker{Version: 1, Device: dev.String(), Reason: reason, Since: c.now().UTC(), From: from}
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := c.Host.CreateClaim(ctx, QuarantineName(dev), body); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("quarantining %s: %w", dev, err)
	}
	return nil
}

// ClearQuarantine returns dev to placement: it deletes dev's marker.
// cleared says whether there was one.
func (c *Claimer) ClearQuarantine(ctx context.Context, dev vfio.Address) (cleared bool, err error) {
	if _, err := c.Host.ReadClaim(ctx, QuarantineName(dev)); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("reading the quarantine of %s: %w", dev, err)
	}
	if err := c.Host.DeleteClaim(ctx, QuarantineName(dev)); err != nil {
		return false, fmt.Errorf("clearing the quarantine of %s: %w", dev, err)
	}
	return true, nil
}

// quarantined returns dev's marker, nil when it has none.
func (c *Claimer) quarantined(ctx context.Context, dev vfio.Address) (*Marker, error) {
	name := QuarantineName(dev)
	b, err := c.Host.ReadClaim(ctx, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the quarantine of %s: %w", dev, err)
	}
	return parseMarker(name, b)
}

func parseMarker(name string, b []byte) (*Marker, error) {
	var m Marker
	if err := json.Unmarshal([]byte(strings.TrimRight(string(b), "\x00")), &m); err != nil {
		return nil, &ForeignVolumeError{Name: name, Err: err}
	}
	if m.Version != 1 || m.Device == "" {
		return nil, &ForeignVolumeError{Name: name, Err: fmt.Errorf("version %d, device %q", m.Version, m.Device)}
	}
	return &m, nil
}

// Quarantines lists the host's quarantined devices, sorted by device.
func (c *Claimer) Quarantines(ctx context.Context) ([]Marker, error) {
	names, err := c.Host.ListClaims(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing quarantined devices: %w", err)
	}
	var out []Marker
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) || !strings.HasSuffix(n, quarantineSuffix) {
			continue
		}
		b, err := c.Host.ReadClaim(ctx, n)
		if errors.Is(err, fs.ErrNotExist) {
			continue // cleared while we listed
		}
		if err != nil {
			return nil, fmt.Errorf("listing quarantined devices: %w", err)
		}
		m, err := parseMarker(n, b)
		if err != nil {
			return nil, fmt.Errorf("listing quarantined devices: %w", err)
		}
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Marker) int { return a.Address().Compare(b.Address()) })
	return out, nil
}

// QuarantineReasons is Quarantines by device, each with why: what
// capacity.Reader's Quarantined returns.
func (c *Claimer) QuarantineReasons(ctx context.Context) (map[vfio.Address]string, error) {
	ms, err := c.Quarantines(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[vfio.Address]string, len(ms))
	for i := range ms {
		out[ms[i].Address()] = ms[i].String()
	}
	return out, nil
}

// backOutIfQuarantined is run right after this apply created its claim t
// on d: when d has a marker, the claim is given back and the device
// refused. A giver writes its marker before it releases its claim, so a
// claim created after that release always finds the marker here.
func (c *Claimer) backOutIfQuarantined(ctx context.Context, d vfio.Address, t *Taken) (*Taken, error) {
	m, err := c.quarantined(ctx, d)
	if err == nil && m == nil {
		return t, nil
	}
	if rerr := c.Release(context.WithoutCancel(ctx), d, t.Holder); rerr != nil {
		if err == nil {
			err = &QuarantinedError{Device: d, Marker: *m}
		}
		return nil, fmt.Errorf("%w (and giving back the claim just made failed: %v)", err, rerr)
	}
	if err != nil {
		return nil, fmt.Errorf("claiming %s: %w", d, err)
	}
	return nil, &QuarantinedError{Device: d, Marker: *m}
}
