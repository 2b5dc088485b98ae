package claim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Pool is the libvirt storage pool (a directory pool) that holds a host's
// claims, and PoolPath its directory; the host side makes it on first use.
const (
	Pool     = "kohaku-claims"
	PoolPath = "/var/lib/kohaku/claims"
)

// prefix starts every claim volume's name; takeover marks the volume that
// reserves the takeover of a stale claim.
const (
	prefix   = "kohaku-claim-"
	takeover = ".takeover-"
)

// DefaultStaleAfter is how old a claim whose VM does not exist must be
// before another apply may take it over: longer than any create takes
// from claiming its devices to defining its domain.
const DefaultStaleAfter = 10 * time.Minute

// Host is what claims need of a host, through its libvirt connection.
// Names are volume names in Pool.
type Host interface {
	// CreateClaim creates the volume name holding content, atomically:
	// it exists with all of content or not at all. A name that exists
	// already is an error wrapping fs.ErrExist.
	CreateClaim(ctx context.Context, name string, content []byte) error
	// ReadClaim returns a volume's content; one that does not exist is an
	// error wrapping fs.ErrNotExist.
	ReadClaim(ctx context.Context, name string) ([]byte, error)
	// DeleteClaim deletes a volume; one that does not exist is no error.
	DeleteClaim(ctx context.Context, name string) error
	// ListClaims lists the volume names of Pool (none when it does not
	// exist yet).
	ListClaims(ctx context.Context) ([]string, error)
	// Domains lists the host's domains, defined or running, with the host
	// PCI functions each has as hostdevs.
	Domains(ctx context.Context) ([]Domain, error)
}

// Domain is one domain of a host as claims (and capacity) see it.
type Domain struct {
	Name     string
	UUID     string
	Hostdevs []vfio.Address
	// PinnedCPUs are the host CPUs its vCPUs are pinned to one to one
	// (a <vcpupin> whose cpuset is a single CPU), sorted. A pin to a
	// set of CPUs (a whole NUMA node) takes none for itself.
	PinnedCPUs []int
}

// Holder is who takes a claim: a VM, known by its domain UUID (chosen
// before the domain is defined, so the claim can name it), and the
// workspace that manages it.
type Holder struct {
	VM        string `json:"vm"`
	UUID      string `json:"uuid"`
	Workspace string `json:"workspace,omitempty"`
}

func (h Holder) String() string {
	s := fmt.Sprintf("VM %s (%s)", h.VM, h.UUID)
	if h.Workspace != "" {
		s += " of workspace " + h.Workspace
	}
	return s
}

// Record is a claim's content.
type Record struct {
	Version int    `json:"version"`
	Device  string `json:"device"`
	Holder
	// Token is the claimer's random token: it names this claim apart
	// from any later claim of the same device by the same VM.
	Token   string    `json:"token"`
	Created time.Time `json:"created"`
}

// VolumeName is the claim volume of a device: kohaku-claim-0000_3b_00_0.
func VolumeName(a vfio.Address) string {
	return fmt.Sprintf("%s%04x_%02x_%02x_%x", prefix, a.Domain, a.Bus, a.Slot, a.Function)
}

// takeoverName is the volume that reserves the k-th attempt (from 1) to
// take over the stale claim with token tok.
func takeoverName(a vfio.Address, tok string, k int) string {
	n := VolumeName(a) + takeover + tok
	if k > 1 {
		n += fmt.Sprintf("-%d", k)
	}
	return n
}

// Device is a device to claim: its lead function (the GPU), which names
// the claim, and every function of its IOMMU group, any of which a
// domain's hostdev makes it taken.
type Device struct {
	Address   vfio.Address
	Functions []vfio.Address
}

// Claimer takes and gives back claims on one host.
type Claimer struct {
	Host Host
	// Now is the clock (time.Now when nil); StaleAfter is
	// DefaultStaleAfter when 0.
	Now        func() time.Time
	StaleAfter time.Duration
	// NewToken makes claim tokens (16 random hex digits when nil).
	NewToken func() string
}

func (c *Claimer) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Claimer) staleAfter() time.Duration {
	if c.StaleAfter > 0 {
		return c.StaleAfter
	}
	return DefaultStaleAfter
}

func (c *Claimer) token() string {
	if c.NewToken != nil {
		return c.NewToken()
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// Taken is a claim a VM now holds.
type Taken struct {
	Record
	// Already is true when the VM held the claim before Take (an apply
	// retried after it claimed): nothing was created.
	Already bool
	// Reclaimed is the stale claim this one took over, nil when none.
	Reclaimed *Record
}

// Message says what happened, for the apply's log or a warning.
func (t *Taken) Message() string {
	switch {
	case t.Reclaimed != nil:
		return fmt.Sprintf("%s: took over the stale claim of %s, made %s, whose domain no longer exists on the host", t.Device, t.Reclaimed.Holder, t.Reclaimed.Created.Format(time.RFC3339))
	case t.Already:
		return fmt.Sprintf("%s: already claimed by this VM", t.Device)
	}
	return fmt.Sprintf("%s: claimed", t.Device)
}

// ClaimedError is a device someone else holds.
type ClaimedError struct {
	Device vfio.Address
	// Holder is the claim's holder; for a device given to a domain by
	// hand, the domain (UUID and name) with ByHand set.
	Holder  Holder
	Created time.Time
	ByHand  bool
	// Pending is set when the holder's domain does not exist yet and the
	// claim is younger than the stale limit: another apply is creating it.
	Pending bool
	// TakingOver is set when another apply is taking over the stale claim.
	TakingOver bool
}

func (e *ClaimedError) Error() string {
	switch {
	case e.ByHand:
		return fmt.Sprintf("%s is taken: domain %s (%s) has it as a hostdev, without a Kohaku claim (given by hand?); "+
			"detach it from that domain (virsh detach-device) or ask for another GPU", e.Device, e.Holder.VM, e.Holder.UUID)
	case e.TakingOver:
		return fmt.Sprintf("%s is being taken over right now by %s, from a stale claim; ask for another GPU or apply again", e.Device, e.Holder)
	case e.Pending:
		return fmt.Sprintf("%s is claimed by %s since %s, which another apply is creating (its domain is not defined yet); "+
			"ask for another GPU, or wait: the claim is reclaimable once it is stale and the VM still does not exist", e.Device, e.Holder, e.Created.Format(time.RFC3339))
	}
	return fmt.Sprintf("%s is claimed by %s since %s; ask for another GPU, or destroy that VM to free it", e.Device, e.Holder, e.Created.Format(time.RFC3339))
}

// ForeignVolumeError is a claim volume whose content is not a claim.
type ForeignVolumeError struct {
	Name string
	Err  error
}

func (e *ForeignVolumeError) Error() string {
	return fmt.Sprintf("volume %s in pool %s does not hold a Kohaku claim (%v); Kohaku leaves it alone: delete it by hand "+
		"(virsh vol-delete --pool %s %s) if nothing uses it", e.Name, Pool, e.Err, Pool, e.Name)
}

func (e *ForeignVolumeError) Unwrap() error { return e.Err }

// parse reads a claim's content.
func parse(name string, b []byte) (*Record, error) {
	// A volume may be longer than what was written (a backend rounding
	// its size up); what follows the JSON is zeros.
	var r Record
	if err := json.Unmarshal([]byte(strings.TrimRight(string(b), "\x00")), &r); err != nil {
		return nil, &ForeignVolumeError{Name: name, Err: err}
	}
	if r.Version != 1 || r.UUID == "" || r.Token == "" {
		return nil, &ForeignVolumeError{Name: name, Err: fmt.Errorf("version %d, uuid %q, token %q", r.Version, r.UUID, r.Token)}
	}
	return &r, nil
}

// maxRounds bounds Take's retries when the claim changes under it (given
// back, taken over) between its steps.
const maxRounds = 4

// Take claims a device for h. Of any number of applies that take the same
// device at once, exactly one succeeds; the others fail with a
// *ClaimedError naming it. A quarantined device is refused with a
// *QuarantinedError, also when its marker appeared while this call made
// its claim (the claim is given back then). It refuses a device a domain other than h's has
// as a hostdev (given by hand), takes over (and says so in Taken) a stale
// claim, one whose VM does not exist on the host and that is older than
// StaleAfter, and succeeds without change when h holds the claim already.
func (c *Claimer) Take(ctx context.Context, d Device, h Holder) (*Taken, error) {
	if h.UUID == "" || h.VM == "" {
		return nil, fmt.Errorf("claiming %s: the holder needs a VM name and the UUID its domain will have", d.Address)
	}
	doms, err := c.Host.Domains(ctx)
	if err != nil {
		return nil, fmt.Errorf("claiming %s: listing the host's domains: %w", d.Address, err)
	}
	return c.take(ctx, d, h, doms)
}

// take is Take with the host's domains read.
func (c *Claimer) take(ctx context.Context, d Device, h Holder, doms []Domain) (*Taken, error) {
	name := VolumeName(d.Address)
	if e := byHand(d, h, doms); e != nil {
		// the domain that has it may be the claim's holder, running
		if cur, err := c.read(ctx, name); err == nil && strings.EqualFold(cur.UUID, e.Holder.UUID) {
			return nil, &ClaimedError{Device: d.Address, Holder: cur.Holder, Created: cur.Created}
		}
		return nil, e
	}
	// fast path: a quarantined device is refused before anything is made
	if m, err := c.quarantined(ctx, d.Address); err != nil {
		return nil, fmt.Errorf("claiming %s: %w", d.Address, err)
	} else if m != nil {
		return nil, &QuarantinedError{Device: d.Address, Marker: *m}
	}
	for range maxRounds {
		rec := Record{Version: 1, Device: d.Address.String(), Holder: h, Token: c.token(), Created: c.now().UTC()}
		body, err := json.Marshal(rec)
		if err != nil {
			return nil, err
		}
		err = c.Host.CreateClaim(ctx, name, body)
		if err == nil {
			return c.backOutIfQuarantined(ctx, d.Address, &Taken{Record: rec})
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("claiming %s: %w", d.Address, err)
		}
		cur, err := c.read(ctx, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // given back since: try again
		}
		if err != nil {
			return nil, fmt.Errorf("claiming %s: reading its claim: %w", d.Address, err)
		}
		if cur.UUID == h.UUID {
			return &Taken{Record: *cur, Already: true}, nil
		}
		if live(cur, doms) || c.now().Sub(cur.Created) < c.staleAfter() {
			return nil, &ClaimedError{Device: d.Address, Holder: cur.Holder, Created: cur.Created, Pending: !live(cur, doms)}
		}
		t, again, err := c.takeOver(ctx, d.Address, cur, rec, body)
		if err != nil {
			return nil, err
		}
		if !again {
			return c.backOutIfQuarantined(ctx, d.Address, t)
		}
	}
	return nil, fmt.Errorf("claiming %s: its claim changed %d times while this apply took it; apply again", d.Address, maxRounds)
}

// takeOver replaces the stale claim cur with rec (content body). Only the
// apply that creates the takeover volume for cur's token may delete cur,
// so of two applies that both saw cur stale one replaces it and the other
// finds the takeover volume there and fails (it never deletes a claim it
// has not reserved). again is true when cur was gone or replaced before
// the reservation was checked, and Take should look again.
func (c *Claimer) takeOver(ctx context.Context, dev vfio.Address, cur *Record, rec Record, body []byte) (*Taken, bool, error) {
	name := VolumeName(dev)
	// An apply that crashed holding the reservation leaves it behind; it
	// is stale in turn after StaleAfter, and the next attempt number is
	// reserved instead.
	var lock string
	for k := 1; ; k++ {
		if k > maxRounds {
			return nil, false, fmt.Errorf("claiming %s: %d takeovers of the stale claim of %s were started and none finished; delete the volumes %s%s* in pool %s by hand once no apply runs", dev, maxRounds, cur.Holder, name, takeover, Pool)
		}
		lock = takeoverName(dev, cur.Token, k)
		err := c.Host.CreateClaim(ctx, lock, body)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, false, fmt.Errorf("claiming %s: reserving the takeover of a stale claim: %w", dev, err)
		}
		other, err := c.read(ctx, lock)
		if errors.Is(err, fs.ErrNotExist) {
			// the other taker finished and removed it: the claim is new
			return nil, true, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("claiming %s: reading the takeover of its stale claim: %w", dev, err)
		}
		if c.now().Sub(other.Created) < c.staleAfter() {
			return nil, false, &ClaimedError{Device: dev, Holder: other.Holder, Created: other.Created, TakingOver: true}
		}
	}
	release := func() { _ = c.Host.DeleteClaim(context.WithoutCancel(ctx), lock) }
	// The reservation is ours: the claim is still cur unless cur's holder
	// gave it back (then someone may have claimed it afresh).
	now, err := c.read(ctx, name)
	gone := errors.Is(err, fs.ErrNotExist)
	if err != nil && !gone {
		release()
		return nil, false, fmt.Errorf("claiming %s: reading its claim again: %w", dev, err)
	}
	if gone || now.Token != cur.Token {
		release()
		return nil, true, nil
	}
	if err := c.Host.DeleteClaim(ctx, name); err != nil {
		release()
		return nil, false, fmt.Errorf("claiming %s: deleting the stale claim of %s: %w", dev, cur.Holder, err)
	}
	err = c.Host.CreateClaim(ctx, name, body)
	release()
	if errors.Is(err, fs.ErrExist) {
		// a fresh claimer came between the delete and the create: it won
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("claiming %s after deleting the stale claim of %s: %w", dev, cur.Holder, err)
	}
	return &Taken{Record: rec, Reclaimed: cur}, false, nil
}

func (c *Claimer) read(ctx context.Context, name string) (*Record, error) {
	b, err := c.Host.ReadClaim(ctx, name)
	if err != nil {
		return nil, err
	}
	return parse(name, b)
}

// live reports whether the domain a claim names exists.
func live(r *Record, doms []Domain) bool {
	return slices.ContainsFunc(doms, func(d Domain) bool { return strings.EqualFold(d.UUID, r.UUID) })
}

// byHand is a *ClaimedError when a domain other than h's has a function of
// d as a hostdev.
func byHand(d Device, h Holder, doms []Domain) *ClaimedError {
	fns := d.Functions
	if !slices.Contains(fns, d.Address) {
		fns = append(slices.Clone(fns), d.Address)
	}
	for _, dom := range doms {
		if strings.EqualFold(dom.UUID, h.UUID) {
			continue
		}
		for _, a := range dom.Hostdevs {
			if slices.Contains(fns, a) {
				return &ClaimedError{Device: d.Address, Holder: Holder{VM: dom.Name, UUID: dom.UUID}, ByHand: true}
			}
		}
	}
	return nil
}

// TakeAll claims every device for h, or none: when one cannot be taken,
// those taken by this call are given back and the error names the one
// that failed. The host's domains are read once for all of them.
func (c *Claimer) TakeAll(ctx context.Context, devs []Device, h Holder) ([]*Taken, error) {
	if h.UUID == "" || h.VM == "" {
		return nil, fmt.Errorf("claiming devices: the holder needs a VM name and the UUID its domain will have")
	}
	doms, err := c.Host.Domains(ctx)
	if err != nil {
		return nil, fmt.Errorf("claiming devices: listing the host's domains: %w", err)
	}
	var out []*Taken
	for _, d := range devs {
		t, err := c.take(ctx, d, h, doms)
		if err != nil {
			var undo []string
			for _, done := range out {
				if done.Already {
					continue
				}
				if rerr := c.Release(context.WithoutCancel(ctx), done.Address(), h); rerr != nil {
					undo = append(undo, rerr.Error())
				}
			}
			if len(undo) > 0 {
				return nil, fmt.Errorf("%w (and giving back the devices claimed before it failed: %s)", err, strings.Join(undo, "; "))
			}
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Address is the claimed device's address.
func (r *Record) Address() vfio.Address {
	a, _ := vfio.ParseAddress(r.Device)
	return a
}

// NotHolderError refuses to give back a claim that someone else holds.
type NotHolderError struct {
	Device vfio.Address
	Holder Holder
}

func (e *NotHolderError) Error() string {
	return fmt.Sprintf("%s is claimed by %s, not by this VM; its claim is left as it is", e.Device, e.Holder)
}

// Release gives back h's claim on a device: the claim volume is deleted
// when h holds it. No claim is no error; someone else's is a
// *NotHolderError and stays.
func (c *Claimer) Release(ctx context.Context, dev vfio.Address, h Holder) error {
	name := VolumeName(dev)
	cur, err := c.read(ctx, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("giving back %s: %w", dev, err)
	}
	if !strings.EqualFold(cur.UUID, h.UUID) {
		return &NotHolderError{Device: dev, Holder: cur.Holder}
	}
	if err := c.Host.DeleteClaim(ctx, name); err != nil {
		return fmt.Errorf("giving back %s: %w", dev, err)
	}
	return nil
}

// List returns the host's claims, sorted by device. Volumes of the pool
// that are not claims (takeover reservations, quarantine markers, others' volumes) are left
// out; a claim volume that does not hold a claim is an error.
func (c *Claimer) List(ctx context.Context) ([]Record, error) {
	names, err := c.Host.ListClaims(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing claims: %w", err)
	}
	var out []Record
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) || strings.Contains(n, takeover) || strings.HasSuffix(n, quarantineSuffix) {
			continue
		}
		r, err := c.read(ctx, n)
		if errors.Is(err, fs.ErrNotExist) {
			continue // given back while we listed
		}
		if err != nil {
			return nil, fmt.Errorf("listing claims: %w", err)
		}
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Record) int { return a.Address().Compare(b.Address()) })
	return out, nil
}

// Stale reports whether a claim may be taken over: its VM's domain does
// not exist and it is older than StaleAfter.
func (c *Claimer) Stale(r *Record, doms []Domain) bool {
	return !live(r, doms) && c.now().Sub(r.Created) >= c.staleAfter()
}
