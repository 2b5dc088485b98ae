package provider

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/phonehome"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// faultBurst sends the provider's phone-home listener on 127.0.0.1:port a
// steady burst of hostile requests while a real VM waits on it: POSTs with
// wrong tokens, oversized bodies, malformed HTTP, wrong methods and paths,
// and slow clients that trickle their headers. Before the listener is up
// the connections are refused and retried. stop ends it and reports what the
// listener answered.
type faultBurst struct {
	addr     string
	stopOnce sync.Once
	stopCh   chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	answers  map[string]map[int]int // kind -> status -> count
	slowCut  atomic.Int64           // slow clients the listener cut off
}

func startFaultBurst(t *testing.T, port int) *faultBurst {
	b := &faultBurst{addr: fmt.Sprintf("127.0.0.1:%d", port), stopCh: make(chan struct{}), answers: map[string]map[int]int{}}
	wrongToken := func() string {
		tok, err := phonehome.NewToken()
		if err != nil {
			t.Error(err)
		}
		return tok
	}
	kinds := map[string]func() string{
		"wrong token": func() string {
			return post(phonehome.PathPrefix+wrongToken(), "application/x-www-form-urlencoded", "instance_id=evil&hostname=evil")
		},
		"oversized": func() string {
			return post(phonehome.PathPrefix+wrongToken(), "application/json", `{"hostname":"`+strings.Repeat("x", 70<<10)+`"}`)
		},
		"malformed": func() string { return "\x00\x01POST /v1/phone-home/\xff HTTP/9.9\r\n\r\n" },
		"not a token": func() string {
			return post(phonehome.PathPrefix+"../../etc/passwd", "application/json", "{")
		},
		"wrong method": func() string {
			return "GET " + phonehome.PathPrefix + wrongToken() + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
		},
	}
	for kind, req := range kinds {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			for b.sleep(50 * time.Millisecond) {
				if code, ok := b.send(req()); ok {
					b.count(kind, code)
				}
			}
		}()
	}
	// Slow clients: a header byte every 500 ms, never finished.
	for range 4 {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			for b.sleep(200 * time.Millisecond) {
				b.slow()
			}
		}()
	}
	t.Cleanup(b.stop)
	return b
}

func post(path, ctype, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", path, ctype, len(body), body)
}

// sleep waits d and reports whether the burst goes on.
func (b *faultBurst) sleep(d time.Duration) bool {
	select {
	case <-b.stopCh:
		return false
	case <-time.After(d):
		return true
	}
}

func (b *faultBurst) send(raw string) (int, bool) {
	c, err := net.DialTimeout("tcp", b.addr, time.Second)
	if err != nil {
		return 0, false // the listener is not up yet
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return 0, false
	}
	if _, err := c.Write([]byte(raw)); err != nil {
		return -1, true // answered by closing
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return -1, true // answered by closing
	}
	resp.Body.Close()
	return resp.StatusCode, true
}

func (b *faultBurst) slow() {
	c, err := net.DialTimeout("tcp", b.addr, time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	req := []byte("POST " + phonehome.PathPrefix + "AAAAAAAAAAAAAAAAAAAAAAAAAA HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 200))
	for i := range req {
		if !b.sleep(500 * time.Millisecond) {
			return
		}
		if _, err := c.Write(req[i : i+1]); err != nil {
			b.slowCut.Add(1) // the listener gave up on us: good
			return
		}
	}
}

func (b *faultBurst) count(kind string, code int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.answers[kind] == nil {
		b.answers[kind] = map[int]int{}
	}
	b.answers[kind][code]++
}

func (b *faultBurst) stop() {
	b.stopOnce.Do(func() { close(b.stopCh) })
	b.wg.Wait()
}

// check stops the burst and fails unless the listener answered each kind
// of hostile request with a refusal, often enough to have mattered. On
// success it logs what the listener answered.
func (b *faultBurst) check(t *testing.T) error {
	b.stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	want := map[string]int{"wrong token": 404, "oversized": 404, "malformed": 400, "not a token": 404, "wrong method": 405}
	var buf bytes.Buffer
	var errs []string
	total := 0
	for kind, code := range want {
		got := b.answers[kind]
		fmt.Fprintf(&buf, "%s: %v; ", kind, got)
		if got[code] < 10 {
			errs = append(errs, fmt.Sprintf("%s: %d answered %d, want at least 10", kind, got[code], code))
		}
		for c, n := range got {
			total += n
			if c == http.StatusOK {
				errs = append(errs, fmt.Sprintf("%s: %d accepted", kind, n))
			}
		}
	}
	fmt.Fprintf(&buf, "slow clients cut off: %d", b.slowCut.Load())
	if len(errs) > 0 {
		return fmt.Errorf("the phone-home burst (%s): %s", buf.String(), strings.Join(errs, "; "))
	}
	t.Logf("%d hostile requests answered while the VM waited (%s)", total, buf.String())
	return nil
}

// faultInspectISO returns the phone-home URL of a seed ISO on disk.
func faultInspectISO(path string) (string, error) {
	img, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	in, err := seed.Inspect(img)
	if err != nil {
		return "", err
	}
	if in.PhoneHomeURL == "" {
		return "", fmt.Errorf("the seed has no phone-home URL")
	}
	return in.PhoneHomeURL, nil
}

// httpPostForm posts a form body the way cloud-init's phone_home does.
func httpPostForm(u, body string) (int, error) {
	resp, err := http.Post(u, "application/x-www-form-urlencoded", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
