package virt

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

func packet(typ, serial, status, proc uint32, payload string) []byte {
	b := make([]byte, wireHeaderLen+len(payload))
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)))
	binary.BigEndian.PutUint32(b[4:], wireProgRemote)
	binary.BigEndian.PutUint32(b[8:], 1)
	binary.BigEndian.PutUint32(b[12:], proc)
	binary.BigEndian.PutUint32(b[16:], typ)
	binary.BigEndian.PutUint32(b[20:], serial)
	binary.BigEndian.PutUint32(b[24:], status)
	copy(b[wireHeaderLen:], payload)
	return b
}

// fakeConn reads what the "daemon" sent, one byte at a time as a slow socket
// might deliver it, and swallows what the client writes.
type fakeConn struct {
	net.Conn
	in io.Reader
}

func (f fakeConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return f.in.Read(p[:1])
}
func (f fakeConn) Write(p []byte) (int, error) { return len(p), nil }

const (
	procDownload = 209
	procGetLib   = 157
)

func TestWireConnRepairsStreamOrdering(t *testing.T) {
	t.Parallel()
	in := bytes.Join([][]byte{
		packet(wireTypeStream, 7, wireStatusCont, procDownload, "data"), // before its reply
		packet(wireTypeReply, 7, wireStatusOK, procDownload, ""),
		packet(wireTypeStream, 7, wireStatusCont, procDownload, "more"),
		packet(wireTypeStream, 7, wireStatusCont, procDownload, ""), // end of data: go-libvirt returns
		packet(wireTypeStream, 7, wireStatusOK, procDownload, ""),   // nobody reads this: dropped
		packet(wireTypeReply, 8, wireStatusOK, procGetLib, "next call"),
		packet(wireTypeReply, 9, wireStatusOK, procDownload, ""), // a stream in the usual order
		packet(wireTypeStream, 9, wireStatusCont, procDownload, "x"),
		packet(wireTypeStream, 9, wireStatusOK, procDownload, ""),
		packet(wireTypeReply, 10, wireStatusError, procDownload, "no such volume"),
		packet(wireTypeStream, 11, wireStatusCont, procDownload, "not ours"), // serial we never called
	}, nil)
	want := bytes.Join([][]byte{
		packet(wireTypeReply, 7, wireStatusOK, procDownload, ""),
		packet(wireTypeStream, 7, wireStatusCont, procDownload, "data"),
		packet(wireTypeStream, 7, wireStatusCont, procDownload, "more"),
		packet(wireTypeStream, 7, wireStatusCont, procDownload, ""),
		packet(wireTypeReply, 8, wireStatusOK, procGetLib, "next call"),
		packet(wireTypeReply, 9, wireStatusOK, procDownload, ""),
		packet(wireTypeStream, 9, wireStatusCont, procDownload, "x"),
		packet(wireTypeStream, 9, wireStatusOK, procDownload, ""),
		packet(wireTypeReply, 10, wireStatusError, procDownload, "no such volume"),
		packet(wireTypeStream, 11, wireStatusCont, procDownload, "not ours"),
	}, nil)
	var calls atomic.Int64
	c := newWireConn(fakeConn{in: bytes.NewReader(in)}, &calls)
	// The client's calls, written in pieces: they mark serials 7, 9 and 10
	// as streams; 8 is an ordinary call.
	for _, call := range [][]byte{
		packet(wireTypeCall, 7, wireStatusOK, procDownload, "args"),
		packet(wireTypeCall, 8, wireStatusOK, procGetLib, ""),
		packet(wireTypeCall, 9, wireStatusOK, procDownload, "args"),
		packet(wireTypeCall, 10, wireStatusOK, procDownload, "args"),
	} {
		c.Write(call[:5])
		c.Write(call[5:])
	}
	if calls.Load() != 4 {
		t.Errorf("counted %d calls, want 4", calls.Load())
	}
	got, err := io.ReadAll(c)
	if err != io.EOF && err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("go-libvirt would see %d bytes, want %d in the repaired order", len(got), len(want))
	}
	if c.dropped != 1 || len(c.streams) != 0 {
		t.Errorf("dropped=%d streams left=%d, want 1 dropped and none left", c.dropped, len(c.streams))
	}
}

func TestWireConnRejectsGarbage(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	c := newWireConn(fakeConn{in: bytes.NewReader([]byte{0, 0, 0, 3, 1, 2, 3})}, &calls)
	if _, err := io.ReadAll(c); err == nil {
		t.Error("a 3-byte packet was accepted")
	}
}
