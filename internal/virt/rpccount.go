package virt

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
)

// countingConn counts the libvirt RPC calls written to a connection by
// following the packet framing of libvirt's wire protocol: each packet starts
// with its length (4 bytes) and a header whose fourth word is the message
// type (0 = call). Stream data and replies are not counted.
type countingConn struct {
	net.Conn
	calls *atomic.Int64

	mu   sync.Mutex
	head [20]byte // length, program, version, procedure, type
	have int      // bytes of the current packet seen so far
	size int      // length of the current packet, once known
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.observe(p)
	return c.Conn.Write(p)
}

func (c *countingConn) observe(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(p) > 0 {
		if c.have < len(c.head) {
			n := copy(c.head[c.have:], p)
			c.have += n
			p = p[n:]
			if c.have >= 4 && c.size == 0 {
				c.size = int(binary.BigEndian.Uint32(c.head[0:4]))
			}
			if c.have == len(c.head) && binary.BigEndian.Uint32(c.head[16:20]) == 0 {
				c.calls.Add(1)
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
