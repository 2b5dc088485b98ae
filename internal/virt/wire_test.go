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
		for _, piece := range [][]byte{call[:5], call[5:]} {
			if _, err := c.Write(piece); err != nil {
				t.Fatal(err)
			}
		}
	}
	if calls.Load() != 4 {
		t.Errorf("counted %d calls, want 4", calls.Load())
	}
	got, err := io.ReadAll(c)
	if err != nil {
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

// recConn records what the client writes and reads what the "daemon" sent.
type recConn struct {
	net.Conn
	in  io.Reader
	out bytes.Buffer
}

func (r *recConn) Read(p []byte) (int, error)  { return r.in.Read(p) }
func (r *recConn) Write(p []byte) (int, error) { return r.out.Write(p) }

// A channel read ends its stream as libvirt's own client does: a stream
// packet with status VIR_NET_ERROR for the stream's serial and procedure,
// and the read waits for libvirtd's answer to it.
func TestWireConnAbortsOpenStreams(t *testing.T) {
	t.Parallel()
	const procOpenChannel = 296
	rc := &recConn{in: bytes.NewReader(bytes.Join([][]byte{
		packet(wireTypeReply, 5, wireStatusOK, procOpenChannel, ""),
		packet(wireTypeStream, 5, wireStatusCont, procOpenChannel, "line\n"),
		packet(wireTypeReply, 5, wireStatusError, procOpenChannel, "stream aborted at client request"),
	}, nil))}
	var calls atomic.Int64
	w := newWireConn(rc, &calls)
	call := packet(wireTypeCall, 5, wireStatusOK, procOpenChannel, "args")
	// Half a packet written: no abort may be slipped in between.
	if _, err := w.Write(call[:10]); err != nil {
		t.Fatal(err)
	}
	if d := w.abortStreams(); d != nil {
		t.Fatalf("abortStreams wrote into a half-written packet (%d streams)", len(d))
	}
	if _, err := w.Write(call[10:]); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	read := func() { // the call's reply and the first data
		t.Helper()
		if _, err := w.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	read()
	dones := w.abortStreams()
	if len(dones) != 1 {
		t.Fatalf("abortStreams: %d streams, want 1", len(dones))
	}
	want := packet(wireTypeStream, 5, wireStatusError, procOpenChannel, "")
	if got := rc.out.Bytes()[len(call):]; !bytes.Equal(got, want) {
		t.Fatalf("abort packet\n got %x\nwant %x", got, want)
	}
	select {
	case <-dones[0]:
		t.Fatal("the abort counted as answered before libvirtd answered")
	default:
	}
	for i := 0; i < 3; i++ {
		select {
		case <-dones[0]:
			if again := w.abortStreams(); len(again) != 0 {
				t.Errorf("an ended stream was aborted again")
			}
			return
		default:
			read()
		}
	}
	t.Fatal("libvirtd's answer to the abort did not end the stream")
}
