package provider

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// The generic parts of the fault tests (CLI workspaces, the host == state
// check) are in acctest; the RPC proxy stays here because it speaks
// internal/virt's wire framing, which acctest must not import.

// The calls and errors the proxy fakes; the framing is virt's
// (virt.ReadPacket, virt.ParseHeader).
const (
	lvProcDefineXMLFlags = 350 // REMOTE_PROC_DOMAIN_DEFINE_XML_FLAGS
	lvProcVolUpload      = 208 // REMOTE_PROC_STORAGE_VOL_UPLOAD
	lvErrConfigUnsup     = 67  // VIR_ERR_CONFIG_UNSUPPORTED
	lvFromDomain         = 20  // VIR_FROM_DOMAIN
)

// faultProxy sits between the provider and libvirtd's TCP listener and
// answers chosen calls with an error of its own instead of passing them on:
// libvirt rejecting a call, on demand, whatever the input.
type faultProxy struct {
	ln       net.Listener
	upstream string
	reject   sync.Map // procedure -> message
	rejected atomic.Int64
	// hold keeps calls of a procedure from libvirtd and never answers
	// them: a call that hangs (held counts them).
	hold sync.Map // procedure -> true
	held atomic.Int64
	// rejectIf, when set, also rejects the calls it says yes to, with its
	// message (for faults that depend on the order of calls).
	rejectIf func(virt.Header) (any, bool)
}

func newFaultProxy(t *testing.T, upstream string) *faultProxy {
	return newFaultProxyRejecting(t, upstream, nil)
}

// newFaultProxyRejecting is newFaultProxy with a rejectIf, set before the
// proxy accepts its first connection.
func newFaultProxyRejecting(t *testing.T, upstream string, rejectIf func(virt.Header) (any, bool)) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, upstream: upstream, rejectIf: rejectIf}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

// URI is the libvirt URI that reaches the host through the proxy.
func (p *faultProxy) URI() string {
	return fmt.Sprintf("qemu+tcp://%s/system", p.ln.Addr())
}

func (p *faultProxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer server.Close()
	var wmu sync.Mutex // the client gets whole packets from both directions
	go func() {
		defer client.Close()
		for {
			b, err := virt.ReadPacket(server, nil)
			if err != nil {
				return
			}
			wmu.Lock()
			_, err = client.Write(b)
			wmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	for {
		b, err := virt.ReadPacket(client, nil)
		if err != nil {
			return
		}
		h := virt.ParseHeader(b)
		msg, ok := p.reject.Load(h.Procedure)
		ok = ok && h.Program == virt.WireProgRemote && h.Type == virt.WireTypeCall
		if !ok && p.rejectIf != nil {
			msg, ok = p.rejectIf(h)
		}
		if ok {
			p.rejected.Add(1)
			wmu.Lock()
			_, err = client.Write(lvErrorReply(b, msg.(string)))
			wmu.Unlock()
			if err != nil {
				return
			}
			continue
		}
		if _, ok := p.hold.Load(h.Procedure); ok && h.Program == virt.WireProgRemote && h.Type == virt.WireTypeCall {
			p.held.Add(1)
			continue
		}
		if _, err := server.Write(b); err != nil {
			return
		}
	}
}

// lvErrorReply is the error reply libvirtd would send to call, a
// remote_error with the given message.
func lvErrorReply(call []byte, msg string) []byte {
	var body bytes.Buffer
	u32 := func(v uint32) { body.Write(binary.BigEndian.AppendUint32(nil, v)) }
	u32(lvErrConfigUnsup) // code
	u32(lvFromDomain)     // domain
	u32(1)                // message: present
	u32(uint32(len(msg)))
	body.WriteString(msg)
	body.Write(make([]byte, (4-len(msg)%4)%4))
	u32(2) // level: VIR_ERR_ERROR
	u32(0) // dom: absent
	u32(0) // str1
	u32(0) // str2
	u32(0) // str3
	u32(0) // int1
	u32(0) // int2
	u32(0) // net: absent
	out := make([]byte, virt.WireHeaderLen, virt.WireHeaderLen+body.Len())
	copy(out[4:24], call[4:24]) // program, version, procedure, type, serial
	binary.BigEndian.PutUint32(out[16:], virt.WireTypeReply)
	binary.BigEndian.PutUint32(out[24:], virt.WireStatusError)
	out = append(out, body.Bytes()...)
	binary.BigEndian.PutUint32(out[0:], uint32(len(out)))
	return out
}
