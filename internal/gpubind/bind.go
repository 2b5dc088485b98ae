package gpubind

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Host is what binding needs from a libvirt host. *virt.Client is one.
type Host interface {
	PCINodeDevices(ctx context.Context) ([]string, error)
	NodeDeviceXML(ctx context.Context, name string) (string, error)
	DetachNodeDevice(ctx context.Context, name, driver string) error
	ReattachNodeDevice(ctx context.Context, name string) error
	PCIHostdevUsers(ctx context.Context) (map[string][]string, error)
}

// Binder applies binding plans on one host. Log, when set, hears of every
// function moved; Debug, when set, of the checks passed over.
type Binder struct {
	Host  Host
	Log   func(msg string, fields map[string]any)
	Debug func(msg string)
	// GiveBackTimeout and SettlePoll, when set, replace the package's
	// defaults of the same names.
	GiveBackTimeout, SettlePoll time.Duration
}

func (b Binder) giveBackTimeout() time.Duration {
	if b.GiveBackTimeout > 0 {
		return b.GiveBackTimeout
	}
	return GiveBackTimeout
}

func (b Binder) settlePoll() time.Duration {
	if b.SettlePoll > 0 {
		return b.SettlePoll
	}
	return SettlePoll
}

func (b Binder) log(msg string, fields map[string]any) {
	if b.Log != nil {
		b.Log(msg, fields)
	}
}

func (b Binder) debug(msg string) {
	if b.Debug != nil {
		b.Debug(msg)
	}
}

// GiveBackTimeout bounds the give-back after a failed bind, which runs even
// when the operation's own deadline has passed.
var GiveBackTimeout = 2 * time.Minute

// Bound is a function after binding, with its original driver.
type Bound struct {
	*vfio.Device
	Original string
}

// BindError is a function that could not be bound; Rollback says what
// happened to the functions bound before it, and Left lists those of them
// the rollback could not give back: they are still on vfio-pci, and whoever
// records bindings must record them, or nothing will ever give them back.
type BindError struct {
	Binding  vfio.Binding
	Err      error
	Rollback string
	Left     []Bound
}

func (e *BindError) Error() string {
	b := e.Binding
	return fmt.Sprintf("%s (%s, was on %s): %v. %s", b.Address, b.ClassName(), DriverOrNone(b.OriginalDriver), e.Err, e.Rollback)
}

func (e *BindError) Unwrap() error { return e.Err }

// DriverOrNone names a driver, or says there is none.
func DriverOrNone(d string) string {
	if d == "" {
		return "no driver"
	}
	return d
}

// Inventory reads every PCI node device of the host.
func (b Binder) Inventory(ctx context.Context) (*vfio.Inventory, error) {
	docs, err := b.Host.PCINodeDevices(ctx)
	if err != nil {
		return nil, err
	}
	return vfio.ParseInventory(docs)
}

// ReadDevice reads one PCI function; one the host does not have yields an
// error wrapping hostapi.ErrNotFound.
func (b Binder) ReadDevice(ctx context.Context, a vfio.Address) (*vfio.Device, error) {
	doc, err := b.Host.NodeDeviceXML(ctx, vfio.NodeDeviceName(a))
	if err != nil {
		return nil, err
	}
	return vfio.ParseDevice(doc)
}

// ReadBack reads each function's device again (its driver now), keeping
// what was known of a function that cannot be read: what a binding records
// of functions a failed rollback left behind.
func (b Binder) ReadBack(ctx context.Context, fns []Bound) []Bound {
	out := make([]Bound, 0, len(fns))
	for _, f := range fns {
		if d, err := b.ReadDevice(ctx, f.Address); err == nil {
			f.Device = d
		}
		out = append(out, f)
	}
	return out
}

// UsersError is a failure to learn which domains use the functions.
type UsersError struct{ Err error }

func (e *UsersError) Error() string { return e.Err.Error() }
func (e *UsersError) Unwrap() error { return e.Err }

// CheckNotInUse refuses, with a *vfio.InUseError, when a running domain
// passes one of the functions through; a failure to ask is a *UsersError.
func (b Binder) CheckNotInUse(ctx context.Context, addrs []vfio.Address) error {
	raw, err := b.Host.PCIHostdevUsers(ctx)
	if err != nil {
		return &UsersError{Err: err}
	}
	return vfio.CheckNotInUse(addrs, hostdevUsers(raw))
}

// hostdevUsers keys PCIHostdevUsers' map by address; entries that are not
// PCI addresses are left out.
func hostdevUsers(raw map[string][]string) map[vfio.Address][]string {
	users := map[vfio.Address][]string{}
	for s, doms := range raw {
		if a, err := vfio.ParseAddress(s); err == nil {
			users[a] = doms
		}
	}
	return users
}

// Bind detaches each function of the plan to vfio-pci and checks it landed
// there; functions already on vfio-pci keep their recorded original driver.
// On a failure it gives back, in reverse order, what it had bound, and the
// *BindError says what happened to each function.
func (b Binder) Bind(ctx context.Context, plan []vfio.Binding) ([]Bound, error) {
	var done []Bound
	for _, fn := range plan {
		if fn.AlreadyBound {
			done = append(done, Bound{Device: fn.Device, Original: fn.OriginalDriver})
			continue
		}
		err := b.Host.DetachNodeDevice(ctx, vfio.NodeDeviceName(fn.Address), "vfio")
		var after *vfio.Device
		if err == nil {
			after, err = b.ReadDevice(ctx, fn.Address)
			switch {
			case err != nil:
				// Detached, but where it is now is unknown: it is given
				// back with the others.
				done = append(done, Bound{Device: fn.Device, Original: fn.OriginalDriver})
			case after.Driver != vfio.DriverVFIO:
				err = fmt.Errorf("libvirt reported success but the function is on %s, not vfio-pci (is the vfio-pci module available on the host? modprobe vfio-pci)", DriverOrNone(after.Driver))
			}
		}
		if err != nil {
			// The give-back has its own bound: the bind may have failed
			// because the operation's deadline ran out on a hung unbind.
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.giveBackTimeout())
			defer cancel()
			settled, settledOK := "", true
			if unanswered(err) {
				// The unbind may still be going on in the host's kernel
				// (a driver waiting for a holder): when it ends, libvirt
				// puts the function on vfio-pci. Wait for it, give it back.
				settled, settledOK = b.settle(gctx, fn)
			}
			ok, failed, left := b.giveBack(gctx, done, plan)
			msg := rollbackMessage(ok, failed, settledOK)
			if !settledOK {
				left = append([]Bound{{Device: fn.Device, Original: fn.OriginalDriver}}, left...)
			}
			if settled != "" {
				msg = strings.TrimSpace(settled + " " + msg)
			}
			return nil, &BindError{Binding: fn, Err: err, Rollback: msg, Left: left}
		}
		b.log("bound a PCI function to vfio-pci", map[string]any{"address": fn.Address.String(), "original_driver": fn.OriginalDriver})
		done = append(done, Bound{Device: after, Original: fn.OriginalDriver})
	}
	return done, nil
}

// unanswered reports a detach that ended without libvirt's answer: the
// operation's deadline, or libvirt not answering within call_timeout. What
// became of the function is not known.
func unanswered(err error) bool {
	var ce *hostconn.ConnectionError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.As(err, &ce) && ce.Op != "connect"
}

// SettlePoll is how often settle reads a function whose detach went
// unanswered.
var SettlePoll = time.Second

// settle follows a function whose detach went unanswered until it is on its
// original driver again, giving it back if it lands on vfio-pci, within ctx.
// It says what happened, and whether the function is settled; one that is
// not may still land on vfio-pci, and must be recorded.
func (b Binder) settle(ctx context.Context, fn vfio.Binding) (string, bool) {
	start := time.Now()
	name := vfio.NodeDeviceName(fn.Address)
	orig := DriverOrNone(fn.OriginalDriver)
	var last string
	for {
		dev, err := b.ReadDevice(ctx, fn.Address)
		switch {
		case errors.Is(err, hostapi.ErrNotFound):
			return fmt.Sprintf("%s is no longer on the host.", fn.Address), true
		case err != nil:
			last = fmt.Sprintf("reading it: %v", err)
		case dev.Driver == fn.OriginalDriver:
			if time.Since(start) < b.settlePoll() {
				return fmt.Sprintf("%s is still on %s.", fn.Address, orig), true
			}
			return fmt.Sprintf("%s's unbind from %s went on after the deadline; the function was given back to %s once it ended (%s later).",
				fn.Address, orig, orig, time.Since(start).Round(time.Second)), true
		case dev.Driver == vfio.DriverVFIO:
			b.log("giving back a PCI function whose unbind outlasted the bind", map[string]any{"address": fn.Address.String()})
			err := b.Host.ReattachNodeDevice(ctx, name)
			if err == nil {
				continue // read again: back on its driver?
			}
			last = fmt.Sprintf("it landed on vfio-pci and giving it back failed: %v", err)
		case dev.Driver == "":
			last = "its unbind has not ended: something still holds the device (a process with /dev/nvidia* open, nvidia-persistenced)"
		default:
			return fmt.Sprintf("%s's unbind went on after the deadline and it is now on %s, not %s.", fn.Address, dev.Driver, orig), true
		}
		select {
		case <-ctx.Done():
			return fmt.Sprintf("%s was not given back within %s: %s. When it lets go the function lands on vfio-pci; the binding records it so that destroy or the next apply gives it back (or: virsh nodedev-reattach %s).",
				fn.Address, time.Since(start).Round(time.Second), last, name), false
		case <-time.After(b.settlePoll()):
		}
	}
}

// GiveBack reattaches the functions this operation bound (not those that
// were on vfio-pci before it), says how it went, and returns those it could
// not give back.
func (b Binder) GiveBack(ctx context.Context, done []Bound, plan []vfio.Binding) (string, []Bound) {
	ok, failed, left := b.giveBack(ctx, done, plan)
	return rollbackMessage(ok, failed, true), left
}

func (b Binder) giveBack(ctx context.Context, done []Bound, plan []vfio.Binding) (ok, failed []string, left []Bound) {
	already := map[vfio.Address]bool{}
	for _, fn := range plan {
		already[fn.Address] = fn.AlreadyBound
	}
	for _, f := range slices.Backward(done) {
		if already[f.Address] {
			continue // it was on vfio-pci before: leave it there
		}
		if err := b.Host.ReattachNodeDevice(ctx, vfio.NodeDeviceName(f.Address)); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v (give it back with virsh nodedev-reattach %s)", f.Address, err, vfio.NodeDeviceName(f.Address)))
			left = append(left, f)
			continue
		}
		ok = append(ok, f.Address.String())
	}
	return ok, failed, left
}

// rollbackMessage says how a give-back went; unchanged is false when a
// function of the failed bind itself may still be off its driver.
func rollbackMessage(ok, failed []string, unchanged bool) string {
	switch {
	case len(failed) > 0:
		return "Rolling back FAILED, these functions are still on vfio-pci: " + strings.Join(failed, "; ")
	case len(ok) > 0 && unchanged:
		return "The functions bound before it were given back to the host (" + strings.Join(ok, ", ") + "); nothing was changed."
	case len(ok) > 0:
		return "The functions bound before it were given back to the host (" + strings.Join(ok, ", ") + ")."
	case unchanged:
		return "Nothing was changed."
	}
	return ""
}

// Rebind binds the plan's functions found off vfio-pci again and returns
// every function of the plan with its original driver: known (by address)
// records what each had before Kohaku first bound it; a function without a
// record keeps the driver it was found on.
func (b Binder) Rebind(ctx context.Context, p []vfio.Binding, known map[string]string) ([]Bound, error) {
	var toBind []vfio.Binding
	for _, fn := range p {
		if !fn.AlreadyBound {
			toBind = append(toBind, fn)
		}
	}
	newly, err := b.Bind(ctx, toBind)
	if err != nil {
		return nil, err
	}
	fresh := map[vfio.Address]Bound{}
	for _, f := range newly {
		fresh[f.Address] = f
	}
	var bound []Bound
	for _, fn := range p {
		if f, ok := fresh[fn.Address]; ok {
			if o, had := known[fn.Address.String()]; had {
				f.Original = o
			}
			bound = append(bound, f)
			continue
		}
		bound = append(bound, Bound{Device: fn.Device, Original: known[fn.Address.String()]})
	}
	return bound, nil
}

// NeedsBinding reports whether some function of the plan is off vfio-pci.
func NeedsBinding(p []vfio.Binding) bool {
	for _, fn := range p {
		if !fn.AlreadyBound {
			return true
		}
	}
	return false
}

// Release gives every function back to the host, last first. A function
// already back on a host driver, or gone from the host, is fine; notes say
// what is unusual (a function gone, or back on another driver than
// original records), failed what is still on vfio-pci and why.
func (b Binder) Release(ctx context.Context, addrs []vfio.Address, original map[vfio.Address]string) (notes, failed []string) {
	for _, a := range slices.Backward(addrs) {
		dev, err := b.ReadDevice(ctx, a)
		if errors.Is(err, hostapi.ErrNotFound) {
			notes = append(notes, fmt.Sprintf("%s is no longer on the host", a))
			continue
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: reading its state: %v", a, err))
			continue
		}
		if dev.Driver != vfio.DriverVFIO {
			continue // given back already
		}
		if err := b.Host.ReattachNodeDevice(ctx, vfio.NodeDeviceName(a)); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", a, err))
			continue
		}
		b.log("gave a PCI function back to the host", map[string]any{"address": a.String()})
		if after, err := b.ReadDevice(ctx, a); err == nil && original[a] != "" && after.Driver != original[a] {
			notes = append(notes, fmt.Sprintf("%s is back on the host with driver %s, not its original %s", a, DriverOrNone(after.Driver), original[a]))
		}
	}
	return notes, failed
}
