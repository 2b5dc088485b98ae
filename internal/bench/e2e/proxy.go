package main

import (
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"

	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// countingProxy is a unix socket that forwards to libvirtd's socket and
// counts the RPC calls clients send, by procedure. The provider is pointed
// at it with qemu:///system?socket=<path> for one untimed refresh, so the
// count is exactly what the provider sent, with no hook in the provider.
type countingProxy struct {
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	counts map[uint32]int64
	conns  int
	down   int64 // bytes libvirtd sent to the clients
	wg     sync.WaitGroup
}

func startProxy(path, upstream string) (*countingProxy, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	p := &countingProxy{ln: ln, upstream: upstream, counts: map[uint32]int64{}}
	go p.accept()
	return p, nil
}

func (p *countingProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("unix", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns++
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			io.Copy(countingWriter{c, p}, up) //nolint:errcheck // ends with either side
			c.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.forward(up, c) //nolint:errcheck // ends with either side
			up.Close()
		}()
	}
}

// forward copies client packets upstream whole, counting the calls.
func (p *countingProxy) forward(dst io.Writer, src io.Reader) error {
	buf := make([]byte, 64<<10)
	for {
		pkt, err := virt.ReadPacket(src, buf)
		if err != nil {
			return err
		}
		buf = pkt[:cap(pkt)]
		if h := virt.ParseHeader(pkt); h.Type == virt.WireTypeCall || h.Type == 4 { // 4: a call with fds
			p.mu.Lock()
			p.counts[h.Procedure]++
			p.mu.Unlock()
		}
		if _, err := dst.Write(pkt); err != nil {
			return err
		}
	}
}

// countingWriter adds what it writes to the proxy's download count.
type countingWriter struct {
	w io.Writer
	p *countingProxy
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.p.mu.Lock()
	c.p.down += int64(n)
	c.p.mu.Unlock()
	return n, err
}

// reset zeroes the counts.
func (p *countingProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts = map[uint32]int64{}
	p.conns = 0
	p.down = 0
}

// rpcCount is a snapshot of the counts.
type rpcCount struct {
	ByProc map[string]int64
	Total  int64
	Conns  int
	// Down is the bytes libvirtd sent (replies and download streams).
	Down int64
}

func (p *countingProxy) snapshot() rpcCount {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := rpcCount{ByProc: map[string]int64{}, Conns: p.conns, Down: p.down}
	for proc, n := range p.counts {
		out.ByProc[procName(proc)] += n
		out.Total += n
	}
	return out
}

// kind splits procedures into domain calls, storage calls and the rest
// (connection setup).
func kind(name string) string {
	switch {
	case strings.HasPrefix(name, "Domain"):
		return "domain"
	case strings.HasPrefix(name, "StorageVol"), strings.HasPrefix(name, "StoragePool"):
		return "storage"
	}
	return "connection"
}

// breakdown formats counts per unit, biggest first: "DomainGetXMLDesc 1.00, ...".
func (r rpcCount) breakdown(per int) string {
	type kv struct {
		k string
		v int64
	}
	var all []kv
	for k, v := range r.ByProc {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var parts []string
	for _, x := range all {
		parts = append(parts, fmt.Sprintf("%s %.2f", x.k, float64(x.v)/float64(per)))
	}
	return strings.Join(parts, ", ")
}

// procNames are the remote procedures Kohaku uses (remote_protocol.x).
var procNames = map[uint32]string{
	1: "ConnectOpen", 2: "ConnectClose", 3: "ConnectGetType", 9: "DomainCreate", 12: "DomainDestroy",
	14: "DomainGetXMLDesc", 15: "DomainGetAutostart", 22: "DomainLookupByID", 23: "DomainLookupByName",
	24: "DomainLookupByUUID", 59: "ConnectGetHostname", 60: "ConnectSupportsFeature", 66: "AuthList",
	84: "StoragePoolLookupByName", 86: "StoragePoolLookupByVolume", 93: "StorageVolCreateXML",
	94: "StorageVolDelete", 95: "StorageVolLookupByName", 97: "StorageVolLookupByPath",
	98: "StorageVolGetInfo", 99: "StorageVolGetXMLDesc", 100: "StorageVolGetPath", 110: "ConnectGetURI",
	157: "ConnectGetLibVersion", 208: "StorageVolUpload", 209: "StorageVolDownload", 212: "DomainGetState",
	231: "DomainUndefineFlags", 273: "ConnectListAllDomains", 281: "ConnectListAllStoragePools",
	282: "StoragePoolListAllVolumes", 316: "ConnectDomainEventCallbackRegisterAny", 350: "DomainDefineXMLFlags",
	353: "DomainInterfaceAddresses", 360: "ConnectRegisterCloseCallback",
}

func procName(p uint32) string {
	if n, ok := procNames[p]; ok {
		return n
	}
	return fmt.Sprintf("proc%d", p)
}
