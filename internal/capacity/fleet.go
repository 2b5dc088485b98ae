package capacity

import (
	"context"
	"sync"

	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/gpubind"
	"github.com/kohaku/terraform-provider-kohaku/internal/holders"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Conn is what the Reader needs of a host's libvirt connection: the
// listings capacity reads, and the host shell gpubind's holder check and
// the BAR reads use where the connection can read the host's files.
type Conn interface {
	Host
	gpubind.HostShell
}

// ForClients is the Reader over a fleet's libvirt connections, host gives
// the connection of a host by name (the fleet's Host). Where a connection
// can read the host's files (local and SSH), it reads the GPUs' BARs and
// looks for host processes holding them with gpubind's holder check;
// over tcp and tls neither is read (memory unknown, no process counted).
func ForClients[C Conn](host func(name string) (C, error)) *Reader {
	hostOf := func(name string) (Host, error) {
		c, err := host(name)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	return &Reader{
		Host:        hostOf,
		Quarantined: Markers(hostOf),
		Files: func(name string) vfio.HostFiles {
			c, err := host(name)
			if err != nil || !c.ReadsHostFiles() {
				return nil
			}
			return c
		},
		Held: func(ctx context.Context, name string, fns []holders.Function) ([]holders.Holder, error) {
			c, err := host(name)
			if err != nil {
				return nil, err
			}
			src := gpubind.HostHolders(c)
			if src == nil {
				return nil, nil
			}
			return gpubind.Holding(ctx, src, fns)
		},
	}
}

// Markers reads the quarantine markers of a host's claims pool (see
// internal/claim): what a Reader's Quarantined is over libvirt.
func Markers(host func(name string) (Host, error)) func(ctx context.Context, name string) (map[vfio.Address]string, error) {
	return func(ctx context.Context, name string) (map[vfio.Address]string, error) {
		h, err := host(name)
		if err != nil {
			return nil, err
		}
		return (&claim.Claimer{Host: h}).QuarantineReasons(ctx)
	}
}

// Result is one host's capacity as ReadHosts reports it: what was read, or
// why the host could not be read.
type Result struct {
	Name string
	Host *placement.Host
	Err  error
}

// ReadHosts reads each named host once, all at the same time, and returns
// their results in the order of names. A host that cannot be read (down,
// refusing, failing a read) is a Result with its error: one host that is
// down does not hide the others.
func (r *Reader) ReadHosts(ctx context.Context, names []string) []Result {
	out := make([]Result, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		out[i].Name = n
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].Host, out[i].Err = r.ReadHost(ctx, n)
		}()
	}
	wg.Wait()
	return out
}
