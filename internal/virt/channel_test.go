package virt

import (
	"errors"
	"strings"
	"testing"
)

// Lines are split across writes as the stream delivers them; blank lines
// are skipped; over-long lines are dropped whole; the writer stops once the
// callback has its line.
func TestLineWriter(t *testing.T) {
	var got []string
	w := &lineWriter{found: make(chan struct{}), line: func(b []byte) bool {
		got = append(got, string(b))
		return string(b) == "stop"
	}}
	long := strings.Repeat("x", MaxChannelLine+10)
	for _, chunk := range []string{"\nhel", "lo\n\n", long[:MaxChannelLine-5], long[MaxChannelLine-5:] + "\nwor", "ld\n"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatalf("write %q...: %v", chunk[:min(len(chunk), 10)], err)
		}
	}
	if _, err := w.Write([]byte("stop\nafter\n")); !errors.Is(err, errFound) {
		t.Errorf("write after the wanted line: err = %v, want errFound", err)
	}
	select {
	case <-w.found:
	default:
		t.Error("found was not signalled")
	}
	if strings.Join(got, "|") != "hello|world|stop" {
		t.Errorf("lines = %q", got)
	}
	if _, err := w.Write([]byte("more\n")); !errors.Is(err, errFound) {
		t.Errorf("write once done: err = %v", err)
	}
}
