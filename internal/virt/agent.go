package virt

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/kohaku/terraform-provider-kohaku/internal/guestaddr"
)

// ErrAgentFileMissing says the guest agent answered but the file is not there (yet).
var ErrAgentFileMissing = errors.New("file not found in the guest")

// agentTimeout is how long libvirt waits for the guest agent per command.
const agentTimeout = 10 // seconds

// agentCommand sends one guest agent command (arguments left out when
// args is nil) and decodes its "return" into reply (nil: ignored). An
// error of the command itself is libvirt's, unwrapped, for the caller to
// judge.
func agentCommand(l *libvirt.Libvirt, dom libvirt.Domain, cmd string, args, reply any) error {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	doc, err := json.Marshal(req)
	if err != nil {
		return err
	}
	res, err := l.QEMUDomainAgentCommand(dom, string(doc), agentTimeout, 0)
	if err != nil {
		return err
	}
	if len(res) == 0 {
		return fmt.Errorf("guest agent gave no answer to %s", cmd)
	}
	var env struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal([]byte(res[0]), &env); err != nil {
		return fmt.Errorf("guest agent answer to %s: %w", cmd, err)
	}
	if reply == nil {
		return nil
	}
	return json.Unmarshal(env.Return, reply)
}

// AgentReadFile reads a small file inside a running guest through the QEMU
// guest agent, over the libvirt connection (no network path to the guest is
// needed). It fails while the agent is not running yet; a missing file gives
// an error wrapping ErrAgentFileMissing.
func (c *Client) AgentReadFile(ctx context.Context, domain, path string, limit int) ([]byte, error) {
	var out []byte
	err := c.Call(ctx, fmt.Sprintf("read %s in domain %s through the guest agent", path, domain), func(l *libvirt.Libvirt) error {
		dom, err := l.DomainLookupByName(domain)
		if err != nil {
			return err
		}
		agent := func(cmd string, args any, reply any) error { return agentCommand(l, dom, cmd, args, reply) }
		var handle int64
		if err := agent("guest-file-open", map[string]any{"path": path, "mode": "r"}, &handle); err != nil {
			var le libvirt.Error
			if errors.As(err, &le) && libvirt.ErrorNumber(le.Code) != libvirt.ErrAgentUnresponsive {
				return fmt.Errorf("%w: %v", ErrAgentFileMissing, err)
			}
			return err
		}
		defer agent("guest-file-close", map[string]any{"handle": handle}, nil) //nolint:errcheck // best effort
		for len(out) <= limit {
			var chunk struct {
				Count int    `json:"count"`
				Buf   string `json:"buf-b64"`
				EOF   bool   `json:"eof"`
			}
			if err := agent("guest-file-read", map[string]any{"handle": handle, "count": 48 * 1024}, &chunk); err != nil {
				return err
			}
			b, err := base64.StdEncoding.DecodeString(chunk.Buf)
			if err != nil {
				return fmt.Errorf("guest agent sent bad base64: %w", err)
			}
			out = append(out, b...)
			if chunk.EOF || chunk.Count == 0 {
				return nil
			}
		}
		return fmt.Errorf("%s in the guest is larger than %d bytes", path, limit)
	})
	return out, err
}

// DomainState reports libvirt's state of a domain by name: "running",
// "shut off", ... or an error wrapping ErrNotFound.
func (c *Client) DomainState(ctx context.Context, domain string) (string, error) {
	var state string
	err := c.Call(ctx, "read the state of domain "+domain, func(l *libvirt.Libvirt) error {
		dom, err := l.DomainLookupByName(domain)
		if notFound(err) {
			return fmt.Errorf("domain %s %w", domain, ErrNotFound)
		}
		if err != nil {
			return err
		}
		s, _, err := l.DomainGetState(dom, 0)
		if err != nil {
			return err
		}
		state = stateName(libvirt.DomainState(s))
		return nil
	})
	return state, err
}

func stateName(s libvirt.DomainState) string {
	switch s {
	case libvirt.DomainRunning:
		return "running"
	case libvirt.DomainBlocked:
		return "blocked"
	case libvirt.DomainPaused:
		return "paused"
	case libvirt.DomainShutdown:
		return "shutting down"
	case libvirt.DomainShutoff:
		return "shut off"
	case libvirt.DomainCrashed:
		return "crashed"
	case libvirt.DomainPmsuspended:
		return "suspended"
	}
	return "unknown"
}

// GuestInterfaces asks the domain's QEMU guest agent for the guest's
// network interfaces and their addresses (libvirt's interface addresses
// with the agent as source): one call, with no lookup. It fails at once
// when the agent is not connected; ctx bounds the wait for one that is
// connected but slow, and the connection stays usable after (the late
// answer is dropped).
func (c *Client) GuestInterfaces(ctx context.Context, ref DomainRef) ([]guestaddr.Interface, error) {
	dom, err := domainHandle(ref)
	if err != nil {
		return nil, err
	}
	// Handed over through a channel: a call abandoned at ctx's end still
	// returns later, and must not write what the caller reads.
	got := make(chan []guestaddr.Interface, 1)
	err = c.Call(ctx, "read the guest's addresses of domain "+ref.String()+" through the guest agent", func(l *libvirt.Libvirt) error {
		ifaces, err := l.DomainInterfaceAddresses(dom, uint32(libvirt.DomainInterfaceAddressesSrcAgent), 0)
		if err != nil {
			return err
		}
		var out []guestaddr.Interface
		for _, i := range ifaces {
			g := guestaddr.Interface{Name: i.Name}
			if len(i.Hwaddr) > 0 {
				g.MAC = i.Hwaddr[0]
			}
			for _, a := range i.Addrs {
				g.IPs = append(g.IPs, guestaddr.IP{Addr: a.Addr, Prefix: uint(a.Prefix)})
			}
			out = append(out, g)
		}
		got <- out
		return nil
	})
	if err != nil {
		return nil, err
	}
	return <-got, nil
}

// AgentExec runs path with args in a running guest through the QEMU guest
// agent's guest-exec, and waits (up to wait) for it to exit. An agent that
// does not answer gives an error wrapping ErrAgentUnavailable; an agent that
// refuses guest-exec (some distributions block it) gives its own error.
func (c *Client) AgentExec(ctx context.Context, domain, path string, args []string, wait time.Duration) (*AgentExecResult, error) {
	op := fmt.Sprintf("run %s in domain %s through the guest agent", path, domain)
	agent := func(cmd string, cargs any, reply any) error {
		return c.Call(ctx, op, func(l *libvirt.Libvirt) error {
			dom, err := l.DomainLookupByName(domain)
			if err != nil {
				return err
			}
			err = agentCommand(l, dom, cmd, cargs, reply)
			var le libvirt.Error
			if errors.As(err, &le) && (libvirt.ErrorNumber(le.Code) == libvirt.ErrAgentUnresponsive || libvirt.ErrorNumber(le.Code) == libvirt.ErrOperationInvalid) {
				return fmt.Errorf("%w: %v", ErrAgentUnavailable, err)
			}
			return err
		})
	}
	if err := agent("guest-ping", nil, nil); err != nil {
		return nil, err
	}
	var started struct {
		PID int64 `json:"pid"`
	}
	if err := agent("guest-exec", map[string]any{"path": path, "arg": args, "capture-output": true}, &started); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		var st struct {
			Exited   bool   `json:"exited"`
			ExitCode int    `json:"exitcode"`
			Out      string `json:"out-data"`
			Err      string `json:"err-data"`
		}
		if err := agent("guest-exec-status", map[string]any{"pid": started.PID}, &st); err != nil {
			return nil, err
		}
		if st.Exited {
			o, _ := base64.StdEncoding.DecodeString(st.Out)
			e, _ := base64.StdEncoding.DecodeString(st.Err)
			return &AgentExecResult{ExitCode: st.ExitCode, Output: string(o) + string(e)}, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: still running after %s", op, wait)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w", op, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
