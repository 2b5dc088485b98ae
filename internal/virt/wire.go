package virt

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// libvirt wire protocol values (virnetprotocol.x, remote_protocol.x).
const (
	wireHeaderLen    = 28 // length word + program, version, procedure, type, serial, status
	wireProgRemote   = 0x20008086
	wireTypeCall     = 0 // VIR_NET_CALL
	wireTypeReply    = 1 // VIR_NET_REPLY
	wireTypeStream   = 3 // VIR_NET_STREAM
	wireStatusOK     = 0 // VIR_NET_OK
	wireStatusError  = 1 // VIR_NET_ERROR
	wireStatusCont   = 2 // VIR_NET_CONTINUE
	wireMaxPacketLen = 32<<20 + wireHeaderLen
)

// streamProcs are the remote procedures whose data flows as a stream:
// migrate prepare tunnel (148, 215, 304), open console (201), volume upload
// (208) and download (209), screenshot (211), open channel (296).
var streamProcs = map[uint32]bool{148: true, 201: true, 208: true, 209: true, 211: true, 215: true, 296: true, 304: true}

// wireConn sits between go-libvirt and the socket. Outgoing, it counts RPC
// calls and notes which serials start a stream. Incoming, it repairs two
// orderings go-libvirt mishandles (both seen here as a download that
// returned no data or never returned, after which every call on the
// connection hung):
//
//   - libvirtd may send a stream's first data packet before the reply to the
//     call that opened it. go-libvirt takes whatever arrives first as the
//     reply, then ends the stream on the real reply with no data. Stream
//     packets that arrive before their call's reply are held back and
//     delivered right after it.
//   - go-libvirt's download loop returns on the empty "continue" packet that
//     ends the data and then deregisters its reply channel; a stream packet
//     that still follows (the closing OK) blocks go-libvirt's reader on an
//     unbuffered channel while it holds the lock the deregistering caller
//     needs (digitalocean/go-libvirt issue #241). Such packets are dropped:
//     the library has stopped listening for that serial.
type wireConn struct {
	net.Conn
	calls *atomic.Int64

	wmu  sync.Mutex
	head [24]byte // length, program, version, procedure, type, serial
	have int      // bytes of the current outgoing packet seen so far
	size int      // its length, once known

	rmu     sync.Mutex
	pending []byte

	smu     sync.Mutex
	streams map[uint32]*streamState
	dropped int
}

type streamState struct {
	replied bool     // the call's reply went through
	held    [][]byte // stream packets that came before the reply
	ended   bool     // go-libvirt saw the end of the data
}

func newWireConn(conn net.Conn, calls *atomic.Int64) *wireConn {
	return &wireConn{Conn: conn, calls: calls, streams: map[uint32]*streamState{}}
}

func (c *wireConn) Write(p []byte) (int, error) {
	c.observe(p)
	return c.Conn.Write(p)
}

// observe follows the outgoing packet framing.
func (c *wireConn) observe(p []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for len(p) > 0 {
		if c.have < len(c.head) {
			n := copy(c.head[c.have:], p)
			c.have += n
			p = p[n:]
			if c.have >= 4 && c.size == 0 {
				c.size = int(binary.BigEndian.Uint32(c.head[0:4]))
			}
			if c.have == len(c.head) && binary.BigEndian.Uint32(c.head[16:20]) == wireTypeCall {
				c.calls.Add(1)
				if binary.BigEndian.Uint32(c.head[4:8]) == wireProgRemote && streamProcs[binary.BigEndian.Uint32(c.head[12:16])] {
					c.smu.Lock()
					c.streams[binary.BigEndian.Uint32(c.head[20:24])] = &streamState{}
					c.smu.Unlock()
				}
			}
		} else {
			n := min(c.size-c.have, len(p))
			c.have += n
			p = p[n:]
		}
		if c.have >= len(c.head) && c.have >= c.size {
			c.have, c.size = 0, 0
		}
	}
}

// Read hands go-libvirt the daemon's packets, repaired as described above.
func (c *wireConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.pending) == 0 {
		pkt, err := readPacket(c.Conn)
		if err != nil {
			return 0, err
		}
		c.smu.Lock()
		c.pending = c.route(pkt, c.pending)
		c.smu.Unlock()
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// route appends to out what go-libvirt should see of pkt (and of packets
// held back for it). Callers hold smu.
func (c *wireConn) route(pkt, out []byte) []byte {
	typ := binary.BigEndian.Uint32(pkt[16:20])
	serial := binary.BigEndian.Uint32(pkt[20:24])
	status := binary.BigEndian.Uint32(pkt[24:28])
	st := c.streams[serial]
	if st == nil {
		return append(out, pkt...)
	}
	switch typ {
	case wireTypeReply:
		st.replied = true
		out = append(out, pkt...)
		if status == wireStatusError {
			delete(c.streams, serial) // go-libvirt returns the error
			return out
		}
		held := st.held
		st.held = nil
		for _, h := range held {
			out = c.route(h, out)
		}
		return out
	case wireTypeStream:
		switch {
		case !st.replied:
			st.held = append(st.held, pkt)
			return out
		case st.ended:
			c.dropped++
			if status != wireStatusCont {
				delete(c.streams, serial)
			}
			return out
		case status == wireStatusCont && len(pkt) == wireHeaderLen:
			st.ended = true
		case status != wireStatusCont:
			delete(c.streams, serial) // OK or error: go-libvirt is done
		}
	}
	return append(out, pkt...)
}

// readPacket reads one whole packet, length word included.
func readPacket(r io.Reader) ([]byte, error) {
	var lenBuf [4]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(lenBuf[:])
	if n < wireHeaderLen || n > wireMaxPacketLen {
		return nil, fmt.Errorf("libvirt sent a packet of %d bytes, which is not a libvirt packet", n)
	}
	pkt := make([]byte, n)
	copy(pkt, lenBuf[:])
	if _, err := io.ReadFull(r, pkt[4:]); err != nil {
		return nil, err
	}
	return pkt, nil
}
