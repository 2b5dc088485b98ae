package virt

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
)

// testCA is a throwaway CA for the TLS dialer's tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial int64

// sign makes a certificate from tmpl, signed by parent's key (self-signed
// when parent is nil), with a new key of its own.
func sign(t *testing.T, tmpl *x509.Certificate, parent *testCA) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	issuer, issuerKey := tmpl, key
	if parent != nil {
		issuer, issuerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, issuerKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func newTestCA(t *testing.T, cn string) *testCA {
	c, key, certPEM := sign(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, nil)
	return &testCA{cert: c, key: key, pem: certPEM}
}

// issue returns a leaf certificate and key in PEM.
func (ca *testCA) issue(t *testing.T, cn string, usage x509.ExtKeyUsage, ips ...net.IP) (certPEM, keyPEM []byte) {
	_, key, certPEM := sign(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: cn}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
	}, ca)
	kder, _ := x509.MarshalECPrivateKey(key)
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// pkiDir writes a client pki directory in libvirt's layout.
func pkiDir(t *testing.T, caPEM, certPEM, keyPEM []byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range map[string][]byte{"cacert.pem": caPEM, "clientcert.pem": certPEM, "clientkey.pem": keyPEM} {
		if b == nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fakeTLSLibvirtd serves TLS on loopback as libvirtd does: it asks for a
// client certificate, checks it against its CA after the handshake, and
// sends 1 when it accepts it or closes the session when it does not. With
// silent it accepts TCP connections and never speaks.
func fakeTLSLibvirtd(t *testing.T, ca *testCA, silent bool) string {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, "127.0.0.1", x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer raw.Close()
				if silent {
					time.Sleep(3 * time.Second)
					return
				}
				// Like gnutls in libvirtd: request a certificate, verify it
				// ourselves after the handshake.
				c := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert})
				if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
					return
				}
				if err := c.Handshake(); err != nil {
					return
				}
				peers := c.ConnectionState().PeerCertificates
				if len(peers) == 0 {
					return
				}
				if _, err := peers[0].Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
					return // refused: close without the byte
				}
				// The byte tells the client it was accepted; then wait for
				// it to hang up. Either failing shows on the client's side.
				_, _ = c.Write([]byte{1})
				_, _ = c.Read(make([]byte, 4))
			}()
		}
	}()
	return ln.Addr().String()
}

func tlsEndpoint(t *testing.T, addr, pki string) (Endpoint, Settings) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ep, err := hostconn.ParseURI("qemu+tls://" + host + ":" + port + "/system")
	if err != nil {
		t.Fatal(err)
	}
	return ep, Settings{DialTimeout: time.Second, TLS: TLSSettings{PKIPath: pki}}
}

func TestTLSDialer(t *testing.T) {
	ca := newTestCA(t, "test CA")
	stranger := newTestCA(t, "stranger CA")
	addr := fakeTLSLibvirtd(t, ca, false)
	clientCert, clientKey := ca.issue(t, "good client", x509.ExtKeyUsageClientAuth)
	strangerCert, strangerKey := stranger.issue(t, "stranger client", x509.ExtKeyUsageClientAuth)

	cases := map[string]struct {
		pki  string
		host string // dial this name instead of 127.0.0.1
		want []string
	}{
		"accepted": {pki: pkiDir(t, ca.pem, clientCert, clientKey)},
		"client certificate refused": {pki: pkiDir(t, ca.pem, strangerCert, strangerKey),
			want: []string{"libvirtd refused the client certificate", "clientcert.pem (subject CN=stranger client, issued by CN=stranger CA)", "ca_file"}},
		"server not trusted": {pki: pkiDir(t, stranger.pem, clientCert, clientKey),
			want: []string{"the TLS certificate of " + addr + " is not trusted", "cacert.pem", "tls.no_verify"}},
		"name not in the certificate": {pki: pkiDir(t, ca.pem, clientCert, clientKey), host: "localhost",
			want: []string{`is not valid for the name "localhost"`, "subjectAltName"}},
		"client files missing": {pki: pkiDir(t, ca.pem, nil, nil),
			want: []string{"the TLS client certificate clientcert.pem is missing: looked for ", "tls.pki_path"}},
		"CA file missing": {pki: pkiDir(t, nil, clientCert, clientKey),
			want: []string{"the TLS CA certificate cacert.pem is missing"}},
		"key does not match": {pki: pkiDir(t, ca.pem, clientCert, strangerKey),
			want: []string{"cannot be used together"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ep, s := tlsEndpoint(t, addr, tc.pki)
			if tc.host != "" {
				ep.Host = tc.host
			}
			c, err := newTLSDialer(ep, s).Dial()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("dial succeeded, want an error")
			}
			var te *TLSError
			if !errors.As(err, &te) {
				t.Errorf("err is %T, want a *TLSError: %v", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			if hint(ep, err) != "" {
				t.Errorf("a TLSError already says what to do; hint adds %q", hint(ep, err))
			}
		})
	}
}

// A port that accepts TCP and never speaks TLS: the dial ends at the dial
// timeout (go-libvirt's dialer waited forever for libvirtd's byte).
func TestTLSDialerSilentPortIsBounded(t *testing.T) {
	ca := newTestCA(t, "test CA")
	addr := fakeTLSLibvirtd(t, ca, true)
	cert, key := ca.issue(t, "client", x509.ExtKeyUsageClientAuth)
	ep, s := tlsEndpoint(t, addr, pkiDir(t, ca.pem, cert, key))
	s.DialTimeout = 300 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		c, err := newTLSDialer(ep, s).Dial()
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "did not complete a TLS handshake within 300ms") {
			t.Errorf("err = %v, want the handshake timeout", err)
		}
	case <-time.After(2500 * time.Millisecond):
		t.Fatal("the dial outlived its timeout")
	}
}

// Without pkipath the dialer looks where libvirt's client looks.
func TestTLSDialerDefaultPaths(t *testing.T) {
	ep, err := hostconn.ParseURI("qemu+tls://gpu1.example.com/system")
	if err != nil {
		t.Fatal(err)
	}
	d := newTLSDialer(ep, Settings{})
	if got := d.addr; got != "gpu1.example.com:"+strconv.Itoa(16514) {
		t.Errorf("addr = %s", got)
	}
	last := func(s []string) string { return s[len(s)-1] }
	if last(d.caPaths) != "/etc/pki/CA/cacert.pem" || last(d.certPaths) != "/etc/pki/libvirt/clientcert.pem" || last(d.keyPaths) != "/etc/pki/libvirt/private/clientkey.pem" {
		t.Errorf("system paths: %v %v %v", d.caPaths, d.certPaths, d.keyPaths)
	}
	ep, _ = hostconn.ParseURI("qemu+tls://h/system?pkipath=/srv/pki&no_verify=1")
	d = newTLSDialer(ep, Settings{})
	if !d.noVerify || d.caPaths[0] != "/srv/pki/cacert.pem" || len(d.certPaths) != 1 {
		t.Errorf("URI parameters: noVerify=%v ca=%v cert=%v", d.noVerify, d.caPaths, d.certPaths)
	}
	// An explicit tls.no_verify = false wins over the URI's no_verify=1.
	if d = newTLSDialer(ep, Settings{TLS: TLSSettings{NoVerify: false, NoVerifySet: true}}); d.noVerify {
		t.Error("the URI's no_verify=1 overrode an explicit no_verify = false")
	}
	// The provider's setting wins over the URI's.
	d = newTLSDialer(ep, Settings{TLS: TLSSettings{PKIPath: "/etc/kohaku/pki"}})
	if d.keyPaths[0] != "/etc/kohaku/pki/clientkey.pem" {
		t.Errorf("tls.pki_path does not win: %v", d.keyPaths)
	}
}
