package claim

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
)

// fakeHost is a host's claim pool and domains in memory, atomic as
// libvirt's volume create is: of two creates of one name, one fails.
type fakeHost struct {
	mu      sync.Mutex
	vols    map[string][]byte
	domains []Domain
	// beforeDomains runs at the start of every Domains call (outside the
	// lock): a barrier there makes claimers race.
	beforeDomains func()
	// afterCreate runs after every create that succeeded.
	afterCreate func(name string)
	creates     int
	domainReads atomic.Int64
	deletes     []string
}

func newFake() *fakeHost { return &fakeHost{vols: map[string][]byte{}} }

func (f *fakeHost) CreateClaim(_ context.Context, name string, content []byte) error {
	f.mu.Lock()
	if _, ok := f.vols[name]; ok {
		f.mu.Unlock()
		return fmt.Errorf("volume %s: %w", name, fs.ErrExist)
	}
	f.vols[name] = slices.Clone(content)
	f.creates++
	hook := f.afterCreate
	f.mu.Unlock()
	if hook != nil {
		hook(name)
	}
	return nil
}

func (f *fakeHost) ReadClaim(_ context.Context, name string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.vols[name]
	if !ok {
		return nil, fmt.Errorf("volume %s: %w", name, fs.ErrNotExist)
	}
	return slices.Clone(b), nil
}

func (f *fakeHost) DeleteClaim(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.vols, name)
	f.deletes = append(f.deletes, name)
	return nil
}

func (f *fakeHost) ListClaims(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.vols {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeHost) Domains(context.Context) ([]Domain, error) {
	f.domainReads.Add(1)
	if f.beforeDomains != nil {
		f.beforeDomains()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.domains), nil
}

func (f *fakeHost) defineDomain(h Holder) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.domains = append(f.domains, Domain{Name: h.VM, UUID: h.UUID})
}

func (f *fakeHost) names() []string {
	n, _ := f.ListClaims(context.Background())
	return n
}
