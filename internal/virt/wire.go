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
	wireProtoVersion = 1 // REMOTE_PROTOCOL_VERSION
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
	proc    uint32        // the procedure that opened it
	done    chan struct{} // closed when libvirtd has ended the stream
	replied bool          // the call's reply went through
	held    [][]byte      // stream packets that came before the reply
	ended   bool          // go-libvirt saw the end of the data
}

func newWireConn(conn net.Conn, calls *atomic.Int64) *wireConn {
	return &wireConn{Conn: conn, calls: calls, streams: map[uint32]*streamState{}}
}

func (c *wireConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.observe(p)
	return c.Conn.Write(p)
}

// abortStreams asks libvirtd to abort every stream of this connection that
// it has not ended yet, the way libvirt's own client does (virStreamAbort:
// a stream packet with status VIR_NET_ERROR and no payload), and returns a
// channel per stream that is closed when libvirtd has answered. A stream
// whose abort cannot be sent (a packet is half written) is left to the
// connection's close.
func (c *wireConn) abortStreams() []<-chan struct{} {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.have != 0 {
		return nil
	}
	c.smu.Lock()
	defer c.smu.Unlock()
	var dones []<-chan struct{}
	for serial, st := range c.streams {
		var pkt [wireHeaderLen]byte
		binary.BigEndian.PutUint32(pkt[0:4], wireHeaderLen)
		binary.BigEndian.PutUint32(pkt[4:8], wireProgRemote)
		binary.BigEndian.PutUint32(pkt[8:12], wireProtoVersion)
		binary.BigEndian.PutUint32(pkt[12:16], st.proc)
		binary.BigEndian.PutUint32(pkt[16:20], wireTypeStream)
		binary.BigEndian.PutUint32(pkt[20:24], serial)
		binary.BigEndian.PutUint32(pkt[24:28], wireStatusError)
		if _, err := c.Conn.Write(pkt[:]); err != nil {
			return dones
		}
		dones = append(dones, st.done)
	}
	return dones
}

// endStream forgets a stream libvirtd has ended. Callers hold smu.
func (c *wireConn) endStream(serial uint32) {
	if st := c.streams[serial]; st != nil {
		close(st.done)
		delete(c.streams, serial)
	}
}

// observe follows the outgoing packet framing. Callers hold wmu.
func (c *wireConn) observe(p []byte) {
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
					c.streams[binary.BigEndian.Uint32(c.head[20:24])] = &streamState{
						proc: binary.BigEndian.Uint32(c.head[12:16]), done: make(chan struct{}),
					}
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
		pkt, err := ReadPacket(c.Conn, nil)
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
		again := st.replied
		st.replied = true
		out = append(out, pkt...)
		if status == wireStatusError || again {
			// The call failed (go-libvirt returns the error), or this is
			// libvirtd's answer to an abort.
			c.endStream(serial)
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
				c.endStream(serial)
			}
			return out
		case status == wireStatusCont && len(pkt) == wireHeaderLen:
			st.ended = true
		case status != wireStatusCont:
			c.endStream(serial) // OK or error: go-libvirt is done
		}
	}
	return append(out, pkt...)
}

// The wire constants tools on the same connection need (the acceptance
// tests' fault-injection proxy, the bench's counting proxy): framing is
// parsed here only.
const (
	WireHeaderLen   = wireHeaderLen
	WireProgRemote  = wireProgRemote
	WireTypeCall    = wireTypeCall
	WireTypeReply   = wireTypeReply
	WireStatusError = wireStatusError
)

// Header is the fixed part of a libvirt packet: its length word, then
// program, version, procedure, type, serial and status.
type Header struct {
	Len, Program, Version, Procedure, Type, Serial, Status uint32
}

// ParseHeader reads the header of pkt, which holds at least WireHeaderLen
// bytes (as ReadPacket returns).
func ParseHeader(pkt []byte) Header {
	u := func(i int) uint32 { return binary.BigEndian.Uint32(pkt[i : i+4]) }
	return Header{Len: u(0), Program: u(4), Version: u(8), Procedure: u(12), Type: u(16), Serial: u(20), Status: u(24)}
}

// ReadPacket reads one whole packet, length word included, into buf when it
// is large enough (else into a new slice). A length that no libvirt packet
// has is an error.
func ReadPacket(r io.Reader, buf []byte) ([]byte, error) {
	var lenBuf [4]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(lenBuf[:])
	if n < wireHeaderLen || n > wireMaxPacketLen {
		return nil, fmt.Errorf("libvirt sent a packet of %d bytes, which is not a libvirt packet", n)
	}
	pkt := buf[:0]
	if cap(pkt) < int(n) {
		pkt = make([]byte, n)
	}
	pkt = pkt[:n]
	copy(pkt, lenBuf[:])
	if _, err := io.ReadFull(r, pkt[4:]); err != nil {
		return nil, err
	}
	return pkt, nil
}
